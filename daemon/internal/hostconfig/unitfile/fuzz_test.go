// Native fuzz target of the host unit reader, and the tests of its seeds.
// Properties: a unit that does not parse is refused unit-syntax, one whose
// ExecStart= is not read unit-exec, and nothing else; what parses renders
// to a unit that parses to the same unit (sections, keys, values, orders),
// and renders again to the same bytes; its ExecStart= argv and standard
// input text read the same from the rendering, and every word of an argv
// is non-empty, without white space or a character bcd does not read.

package unitfile

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode"

	"bcd/internal/refusal"
)

// seeds are units bcd meets (the dev stack's pool policies, the helper's
// e2e units) and the edges of the syntax.
var seeds = []string{
	"[Unit]\nDescription=bcd huge pages\n\n[Service]\nType=oneshot\nExecStart=/usr/bin/tee /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages\nStandardInput=data\nStandardInputText=64\n",
	"[Service]\nType=oneshot\nExecStart=/usr/sbin/modprobe -a vfio-pci kvm\nRemainAfterExit=yes\n\n[Install]\nWantedBy=multi-user.target\n",
	"[Service]\nType=oneshot\nExecStart=/bin/sh -c 'echo 64 > /proc/sys/vm/nr_hugepages'\n",
	"# a comment\n; another\n[Service]\n  ExecStart = /bin/true  \nExecStart=/bin/false\n[Unit]\n[Service]\nExecStart=\nA=b=c\n=v\n[a]b]\n",
	"[Service]\r\nExecStart=/bin/true\r\n",
	"[Service]\nExecStart=/bin/echo \\\n  continued\n",
	"Key=outside\n[Service]\n",
	"[]\n[Service]\nStandardInputText=a\nStandardInputText=\nStandardInputText=b\n",
}

// check is the properties of one input.
func check(t *testing.T, data []byte) {
	u, err := Parse(data)
	if err != nil {
		if !errors.Is(err, CodeSyntax) || !strings.HasPrefix(err.Error(), string(CodeSyntax)+": ") {
			t.Fatalf("Parse refused without unit-syntax: %v", err)
		}
		return
	}
	rendered := u.Render()
	again, err := Parse(rendered)
	if err != nil {
		t.Fatalf("the rendering does not parse: %v\n%q", err, rendered)
	}
	if !reflect.DeepEqual(u, again) {
		t.Fatalf("the rendering parses to another unit:\n%q\nfrom %q", rendered, data)
	}
	if twice := again.Render(); string(twice) != string(rendered) {
		t.Fatalf("rendering is not stable:\n%q\n%q", rendered, twice)
	}
	if u.StdinText() != again.StdinText() {
		t.Fatal("the standard input text changed in the rendering")
	}
	argv, err := u.ExecStart()
	argvAgain, errAgain := again.ExecStart()
	if (err == nil) != (errAgain == nil) || !reflect.DeepEqual(argv, argvAgain) {
		t.Fatalf("ExecStart reads %q (%v), from the rendering %q (%v)", argv, err, argvAgain, errAgain)
	}
	if err != nil {
		if refusal.CodeOf(err) != CodeExec {
			t.Fatalf("ExecStart refused without unit-exec: %v", err)
		}
		return
	}
	for _, words := range argv {
		if len(words) == 0 {
			t.Fatal("an empty argv")
		}
		for _, w := range words {
			if w == "" || strings.IndexFunc(w, unicode.IsSpace) >= 0 || strings.ContainsAny(w, Unread) {
				t.Fatalf("argv word %q", w)
			}
		}
	}
}

func FuzzUnitFile(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(check)
}

// The seeds hold, and each refusal is the one its input earns.
func TestTheSeedsParseRenderAndRefuseWithCodes(t *testing.T) {
	for _, s := range seeds {
		check(t, []byte(s))
	}
	for input, want := range map[string]Code{
		"[Service]\nExecStart=/bin/echo \\\n  continued\n": CodeSyntax,
		"Key=outside\n[Service]\n":                         CodeSyntax,
		"[Service]\nnot a key\n":                           CodeSyntax,
	} {
		if _, err := Parse([]byte(input)); refusal.CodeOf(err) != want {
			t.Errorf("%q: %v, want %s", input, err, want)
		}
	}
	u, err := Parse([]byte(seeds[2]))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.ExecStart(); refusal.CodeOf(err) != CodeExec {
		t.Fatalf("a quoted ExecStart: %v, want %s", err, CodeExec)
	}
	u, _ = Parse([]byte(seeds[3]))
	want := "[Service]\nExecStart=/bin/true\nExecStart=/bin/false\nExecStart=\nA=b=c\n=v\n\n[Unit]\n\n[a]b]\n"
	if got := string(u.Render()); got != want {
		t.Fatalf("rendered %q, want %q", got, want)
	}
}
