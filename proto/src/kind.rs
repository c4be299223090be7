//! The command kinds both sides know, generated from `proto/kinds.toml`
//! (`cargo xtask codegen`), as [`crate::refusal`] is from the refusal list:
//! [`TABLE`] lists each kind with its parameters. bcd's registry is held to
//! the same list by its tests; the dev stack's admin endpoint and CLI check a
//! command against it before it is enqueued ([`Kind::find`]).

/// A parameter's JSON type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamType {
    /// A JSON string.
    String,
    /// A JSON number without a fraction.
    Integer,
    /// Any JSON number.
    Number,
    /// `true` or `false`.
    Boolean,
    /// A JSON object.
    Object,
    /// A JSON array.
    Array,
}

impl ParamType {
    /// The type's name in `proto/kinds.toml`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ParamType::String => "string",
            ParamType::Integer => "integer",
            ParamType::Number => "number",
            ParamType::Boolean => "boolean",
            ParamType::Object => "object",
            ParamType::Array => "array",
        }
    }
}

/// One parameter of a kind: a key of its params object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param {
    /// The key.
    pub name: &'static str,
    /// Its JSON type.
    pub ty: ParamType,
    /// Whether a command of the kind must give it.
    pub required: bool,
    /// What it is, in one line.
    pub about: &'static str,
}

/// One command kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kind {
    /// The `Command.kind` string.
    pub name: &'static str,
    /// What it does and outputs, in one line.
    pub about: &'static str,
    /// Whether only a fakehw bcd runs it.
    pub fakehw: bool,
    /// Its parameters.
    pub params: &'static [Param],
    /// Parameters of which exactly one must be given (empty: no such rule).
    pub one_of: &'static [&'static str],
}

impl Kind {
    /// The kind named `name`, if the list has it.
    pub fn find(name: &str) -> Option<&'static Kind> {
        TABLE.iter().find(|k| k.name == name)
    }

    /// Its parameter named `name`.
    pub fn param(&self, name: &str) -> Option<&'static Param> {
        self.params.iter().find(|p| p.name == name)
    }
}

include!("gen/kinds.rs");
