//! What the OTLP receiver accepts of an OTLP/JSON body: a valid
//! `ExportMetricsServiceRequest` in the protobuf JSON mapping, and nothing
//! else. Every known field of the metrics model (and of the resource,
//! scope, attribute and exemplar messages under it) is checked for its JSON
//! type before the body is decoded: a 64-bit integer is a JSON integer or a
//! decimal string, a double a JSON number or a numeric string (or `NaN`,
//! `Infinity`, `-Infinity`), a oneof has at most one member (a data point's
//! value exactly one). The decoder alone would take `"asInt": "many"` or a
//! data point with both values. Unknown fields are ignored, as the decoder
//! ignores them.
//!
//! The size of what a body decodes to is bounded too ([`Limits`]): how
//! many data points, values and attributes, and how deep an attribute's
//! value nests.
//!
//! It depends on `serde_json` alone, so the fuzz target builds it as is.

use serde_json::{Map, Value};

/// How much one export may hold once decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Data points, of every metric together.
    pub points: usize,
    /// Values in all (attributes, their nested values, buckets, bounds).
    pub values: usize,
    /// How deep an attribute's value may nest (arrays and key-value lists).
    pub depth: usize,
}

/// The receiver's limits: bcd's exports hold a few dozen points.
pub const LIMITS: Limits = Limits { points: 10_000, values: 200_000, depth: 8 };

/// A body's defect: where (a JSON path) and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    /// The path of the offending field (`resourceMetrics[0].…`).
    pub path: String,
    /// What is wrong with it (no value of the body is quoted).
    pub what: &'static str,
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.what)
    }
}

type Checked = Result<(), Invalid>;

/// The walk: the path so far and what was counted.
struct Walk {
    path: Vec<String>,
    limits: Limits,
    points: usize,
    values: usize,
}

/// Checks a parsed OTLP/JSON body against the metrics model and `limits`.
pub fn check(body: &Value, limits: Limits) -> Checked {
    let mut walk = Walk { path: Vec::new(), limits, points: 0, values: 0 };
    walk.object(body, |w, o| w.list(o, "resourceMetrics", Walk::resource_metrics))
}

/// The scalar types of the protobuf JSON mapping.
#[derive(Clone, Copy)]
enum Scalar {
    String,
    Bool,
    /// int32, sint32 (a JSON integer or a decimal string, in range).
    I32,
    /// uint32.
    U32,
    /// int64, sint64, sfixed64.
    I64,
    /// uint64, fixed64.
    U64,
    Double,
    /// An enum: its number, or its name.
    Enum,
}

fn integer_text(text: &str, signed: bool) -> Option<i128> {
    let digits = text.strip_prefix('-').filter(|_| signed).unwrap_or(text);
    if digits.is_empty() || digits.len() > 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn scalar_ok(value: &Value, scalar: Scalar) -> bool {
    let integer = |signed: bool| match value {
        Value::Number(n) => n.as_i64().map(i128::from).or(n.as_u64().map(i128::from)),
        Value::String(s) => integer_text(s, signed),
        _ => None,
    };
    match scalar {
        Scalar::String => value.is_string(),
        Scalar::Bool => value.is_boolean(),
        Scalar::I32 => integer(true).is_some_and(|n| i32::try_from(n).is_ok()),
        Scalar::U32 => integer(false).is_some_and(|n| u32::try_from(n).is_ok()),
        Scalar::I64 => integer(true).is_some_and(|n| i64::try_from(n).is_ok()),
        Scalar::U64 => integer(false).is_some_and(|n| u64::try_from(n).is_ok()),
        Scalar::Double => match value {
            Value::Number(_) => true,
            Value::String(s) => matches!(s.as_str(), "NaN" | "Infinity" | "-Infinity") || s.parse::<f64>().is_ok(),
            _ => false,
        },
        Scalar::Enum => match value {
            Value::String(s) => s.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'),
            _ => scalar_ok(value, Scalar::I32),
        },
    }
}

impl Walk {
    fn fail(&self, what: &'static str) -> Invalid {
        Invalid { path: self.path.join("."), what }
    }

    fn at<T>(
        &mut self,
        name: impl Into<String>,
        f: impl FnOnce(&mut Walk) -> Result<T, Invalid>,
    ) -> Result<T, Invalid> {
        self.path.push(name.into());
        let r = f(self);
        self.path.pop();
        r
    }

    fn count_value(&mut self) -> Checked {
        self.values += 1;
        if self.values > self.limits.values { Err(self.fail("more values than the receiver takes")) } else { Ok(()) }
    }

    /// `value` is an object (`null` is an empty one), checked by `f`.
    fn object(&mut self, value: &Value, f: impl FnOnce(&mut Walk, &Map<String, Value>) -> Checked) -> Checked {
        match value {
            Value::Object(o) => f(self, o),
            Value::Null => f(self, &Map::new()),
            _ => Err(self.fail("is not an object")),
        }
    }

    /// The optional field `name` of `o`, an object checked by `f`.
    fn message(
        &mut self,
        o: &Map<String, Value>,
        name: &str,
        f: fn(&mut Walk, &Map<String, Value>) -> Checked,
    ) -> Checked {
        match o.get(name) {
            None => Ok(()),
            Some(v) => self.at(name, |w| w.object(v, f)),
        }
    }

    /// The optional repeated field `name` of `o`, each an object checked by `f`.
    fn list(
        &mut self,
        o: &Map<String, Value>,
        name: &str,
        f: fn(&mut Walk, &Map<String, Value>) -> Checked,
    ) -> Checked {
        let Some(v) = o.get(name) else { return Ok(()) };
        self.at(name, |w| match v {
            Value::Null => Ok(()),
            Value::Array(items) => items.iter().enumerate().try_for_each(|(i, item)| {
                w.at(format!("[{i}]"), |w| {
                    w.count_value()?;
                    w.object(item, f)
                })
            }),
            _ => Err(w.fail("is not an array")),
        })
    }

    /// The optional scalar fields `names` of `o`.
    fn scalars(&mut self, o: &Map<String, Value>, names: &[&str], scalar: Scalar) -> Checked {
        for name in names {
            if let Some(v) = o.get(*name)
                && !v.is_null()
                && !scalar_ok(v, scalar)
            {
                return self.at(*name, |w| Err(w.fail("is not of the field's type")));
            }
        }
        Ok(())
    }

    /// The optional repeated scalar field `name` of `o`.
    fn scalar_list(&mut self, o: &Map<String, Value>, name: &str, scalar: Scalar) -> Checked {
        let Some(v) = o.get(name) else { return Ok(()) };
        self.at(name, |w| match v {
            Value::Null => Ok(()),
            Value::Array(items) => items.iter().try_for_each(|item| {
                w.count_value()?;
                if scalar_ok(item, scalar) { Ok(()) } else { Err(w.fail("holds a value not of the field's type")) }
            }),
            _ => Err(w.fail("is not an array")),
        })
    }

    /// At most one (`exactly`: exactly one) of the oneof's members is set.
    fn oneof(&mut self, o: &Map<String, Value>, members: &[&str], exactly: bool) -> Checked {
        let set = members.iter().filter(|m| o.get(**m).is_some_and(|v| !v.is_null())).count();
        match set {
            0 if exactly => Err(self.fail("has none of the values it must have one of")),
            0 | 1 => Ok(()),
            _ => Err(self.fail("has more than one of values that exclude each other")),
        }
    }

    fn resource_metrics(&mut self, o: &Map<String, Value>) -> Checked {
        self.scalars(o, &["schemaUrl"], Scalar::String)?;
        self.message(o, "resource", Walk::resource)?;
        self.list(o, "scopeMetrics", Walk::scope_metrics)
    }

    fn resource(&mut self, o: &Map<String, Value>) -> Checked {
        self.scalars(o, &["droppedAttributesCount"], Scalar::U32)?;
        self.list(o, "attributes", Walk::key_value)
    }

    fn scope_metrics(&mut self, o: &Map<String, Value>) -> Checked {
        self.scalars(o, &["schemaUrl"], Scalar::String)?;
        self.message(o, "scope", Walk::scope)?;
        self.list(o, "metrics", Walk::metric)
    }

    fn scope(&mut self, o: &Map<String, Value>) -> Checked {
        self.scalars(o, &["name", "version"], Scalar::String)?;
        self.scalars(o, &["droppedAttributesCount"], Scalar::U32)?;
        self.list(o, "attributes", Walk::key_value)
    }

    fn metric(&mut self, o: &Map<String, Value>) -> Checked {
        self.scalars(o, &["name", "description", "unit"], Scalar::String)?;
        self.list(o, "metadata", Walk::key_value)?;
        self.oneof(o, &["gauge", "sum", "histogram", "exponentialHistogram", "summary"], false)?;
        self.message(o, "gauge", |w, g| w.list(g, "dataPoints", Walk::number_point))?;
        self.message(o, "sum", |w, s| {
            w.scalars(s, &["aggregationTemporality"], Scalar::Enum)?;
            w.scalars(s, &["isMonotonic"], Scalar::Bool)?;
            w.list(s, "dataPoints", Walk::number_point)
        })?;
        self.message(o, "histogram", |w, h| {
            w.scalars(h, &["aggregationTemporality"], Scalar::Enum)?;
            w.list(h, "dataPoints", Walk::histogram_point)
        })?;
        self.message(o, "exponentialHistogram", |w, h| {
            w.scalars(h, &["aggregationTemporality"], Scalar::Enum)?;
            w.list(h, "dataPoints", Walk::exponential_point)
        })?;
        self.message(o, "summary", |w, s| w.list(s, "dataPoints", Walk::summary_point))
    }

    /// What every data point has: its attributes, times, flags; it counts.
    fn point(&mut self, o: &Map<String, Value>) -> Checked {
        self.points += 1;
        if self.points > self.limits.points {
            return Err(self.fail("more data points than the receiver takes"));
        }
        self.scalars(o, &["startTimeUnixNano", "timeUnixNano"], Scalar::U64)?;
        self.scalars(o, &["flags"], Scalar::U32)?;
        self.list(o, "attributes", Walk::key_value)
    }

    fn number_point(&mut self, o: &Map<String, Value>) -> Checked {
        self.point(o)?;
        self.value_of(o)?;
        self.list(o, "exemplars", Walk::exemplar)
    }

    /// A number's value: exactly one of `asDouble`, `asInt`.
    fn value_of(&mut self, o: &Map<String, Value>) -> Checked {
        self.oneof(o, &["asDouble", "asInt"], true)?;
        self.scalars(o, &["asDouble"], Scalar::Double)?;
        self.scalars(o, &["asInt"], Scalar::I64)
    }

    fn histogram_point(&mut self, o: &Map<String, Value>) -> Checked {
        self.point(o)?;
        self.scalars(o, &["count"], Scalar::U64)?;
        self.scalars(o, &["sum", "min", "max"], Scalar::Double)?;
        self.scalar_list(o, "bucketCounts", Scalar::U64)?;
        self.scalar_list(o, "explicitBounds", Scalar::Double)?;
        self.list(o, "exemplars", Walk::exemplar)
    }

    fn exponential_point(&mut self, o: &Map<String, Value>) -> Checked {
        self.point(o)?;
        self.scalars(o, &["count", "zeroCount"], Scalar::U64)?;
        self.scalars(o, &["sum", "min", "max", "zeroThreshold"], Scalar::Double)?;
        self.scalars(o, &["scale"], Scalar::I32)?;
        for side in ["positive", "negative"] {
            self.message(o, side, |w, b| {
                w.scalars(b, &["offset"], Scalar::I32)?;
                w.scalar_list(b, "bucketCounts", Scalar::U64)
            })?;
        }
        self.list(o, "exemplars", Walk::exemplar)
    }

    fn summary_point(&mut self, o: &Map<String, Value>) -> Checked {
        self.point(o)?;
        self.scalars(o, &["count"], Scalar::U64)?;
        self.scalars(o, &["sum"], Scalar::Double)?;
        self.list(o, "quantileValues", |w, q| w.scalars(q, &["quantile", "value"], Scalar::Double))
    }

    fn exemplar(&mut self, o: &Map<String, Value>) -> Checked {
        self.scalars(o, &["timeUnixNano"], Scalar::U64)?;
        self.scalars(o, &["spanId", "traceId"], Scalar::String)?;
        self.list(o, "filteredAttributes", Walk::key_value)?;
        self.value_of(o)
    }

    fn key_value(&mut self, o: &Map<String, Value>) -> Checked {
        self.scalars(o, &["key"], Scalar::String)?;
        self.message(o, "value", Walk::any_value)
    }

    fn any_value(&mut self, o: &Map<String, Value>) -> Checked {
        let depth = self.path.iter().filter(|p| *p == "value" || *p == "values").count();
        if depth > self.limits.depth * 2 {
            return Err(self.fail("nests deeper than the receiver takes"));
        }
        let members =
            ["stringValue", "boolValue", "intValue", "doubleValue", "arrayValue", "kvlistValue", "bytesValue"];
        self.oneof(o, &members, false)?;
        self.scalars(o, &["stringValue", "bytesValue"], Scalar::String)?;
        self.scalars(o, &["boolValue"], Scalar::Bool)?;
        self.scalars(o, &["intValue"], Scalar::I64)?;
        self.scalars(o, &["doubleValue"], Scalar::Double)?;
        self.message(o, "arrayValue", |w, a| w.list(a, "values", Walk::any_value))?;
        self.message(o, "kvlistValue", |w, l| w.list(l, "values", Walk::key_value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(p: &str) -> String {
        format!(
            r#"{{"resourceMetrics":[{{"resource":{{"attributes":[{{"key":"bcd.node.id","value":{{"stringValue":"n"}}}}]}},
               "scopeMetrics":[{{"metrics":[{{"name":"m","gauge":{{"dataPoints":[{p}]}}}}]}}]}}]}}"#
        )
    }

    fn verdict(body: &str) -> Result<(), String> {
        check(&serde_json::from_str(body).unwrap(), LIMITS).map_err(|e| e.to_string())
    }

    #[test]
    fn a_valid_export_is_taken() {
        for good in [
            r#"{"timeUnixNano":"1700000000000000000","asDouble":0.5}"#,
            r#"{"timeUnixNano":1700000000000000000,"asInt":"-3"}"#,
            r#"{"asInt":7,"attributes":[{"key":"gpu.index","value":{"intValue":"3"}}]}"#,
            r#"{"asDouble":"NaN","flags":0}"#,
            r#"{"asDouble":"1.5","attributes":[{"key":"a","value":{"arrayValue":{"values":[{"boolValue":true}]}}}]}"#,
        ] {
            assert_eq!(verdict(&point(good)), Ok(()), "{good}");
        }
    }

    #[test]
    fn what_the_decoder_alone_would_take_is_refused() {
        for (bad, defect) in [
            (r#"{"asInt":"many"}"#, "asInt: is not of the field's type"),
            (r#"{"asInt":1.5}"#, "asInt: is not of the field's type"),
            (r#"{"asDouble":"many"}"#, "asDouble: is not of the field's type"),
            (r#"{"asInt":1,"timeUnixNano":"soon"}"#, "timeUnixNano: is not of the field's type"),
            (r#"{"asInt":1,"asDouble":1.0}"#, "has more than one of values that exclude each other"),
            (r#"{"timeUnixNano":"1"}"#, "has none of the values it must have one of"),
            (r#"{"asInt":1,"attributes":[{"key":"k","value":{"intValue":"many"}}]}"#, "intValue: is not of"),
            (r#"{"asInt":1,"attributes":[{"key":"k","value":{"intValue":1,"stringValue":"x"}}]}"#, "more than one"),
            (r#"{"asInt":"99999999999999999999"}"#, "asInt: is not of the field's type"),
            (r#"{"asInt":1,"timeUnixNano":"-1"}"#, "timeUnixNano: is not of the field's type"),
            (r#"{"asInt":1,"attributes":{"key":"k"}}"#, "attributes: is not an array"),
        ] {
            let got = verdict(&point(bad)).unwrap_err();
            assert!(got.contains(defect), "{bad}: {got}");
        }
    }

    #[test]
    fn a_body_is_bounded_in_points_and_depth() {
        let many = [r#"{"asInt":1}"#; 11].join(",");
        let small = Limits { points: 10, ..LIMITS };
        let err = check(&serde_json::from_str(&point(&many)).unwrap(), small).unwrap_err();
        assert_eq!(err.what, "more data points than the receiver takes");
        let mut nested = r#"{"intValue":1}"#.to_string();
        for _ in 0..20 {
            nested = format!(r#"{{"arrayValue":{{"values":[{nested}]}}}}"#);
        }
        let deep = point(&format!(r#"{{"asInt":1,"attributes":[{{"key":"k","value":{nested}}}]}}"#));
        assert!(verdict(&deep).unwrap_err().contains("nests deeper"));
    }
}
