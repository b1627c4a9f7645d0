package vendors

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// MaxFields is the most paths one ReadFields call reads.
const MaxFields = 16

// Fields are the strings and booleans ReadFields found at its paths.
type Fields struct {
	vals [MaxFields]field
}

type field struct {
	kind byte // 0: none (absent, or not a string or boolean), 's', 't', 'f'
	s    string
}

// Str returns the string at the i-th path, or "": Str(JSONObject(body),
// path...) for that path.
func (f *Fields) Str(i int) string { return f.vals[i].s }

// Bool returns the boolean at the i-th path and whether there is one:
// Get(JSONObject(body), path...).(bool) for that path.
func (f *Fields) Bool(i int) (bool, bool) {
	switch f.vals[i].kind {
	case 't':
		return true, true
	case 'f':
		return false, true
	}
	return false, false
}

// First returns the first non-empty string among the paths i, as
// FirstString does.
func (f *Fields) First(is ...int) string {
	for _, i := range is {
		if s := f.vals[i].s; s != "" {
			return s
		}
	}
	return ""
}

// ReadFields reads the strings and booleans at paths (at most MaxFields)
// of a JSON object body in one pass, building neither the object nor any
// value it does not return: what an Outcome rule reads of a vendor's
// answer, which JSONObject decodes whole into maps. Each path reads
// exactly what Get(JSONObject(body), path...) does: the body's first JSON
// value must be a well-formed object (nested at most encoding/json's
// 10000 deep; what follows it is not read), or every path reads nothing;
// member names match exactly once unescaped (invalid UTF-8 as U+FFFD), a
// name given twice is its last value, and a path element indexes an array
// as strconv.Atoi reads it. Strings are unescaped as encoding/json does.
// TestReadFieldsIsJSONObjectsReading and its fuzz target hold it to that.
func ReadFields(body []byte, paths ...[]string) Fields {
	var f Fields
	if len(paths) > MaxFields {
		panic("vendors.ReadFields: more than MaxFields paths")
	}
	s := scanner{b: body, paths: paths, out: &f}
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		return Fields{} // no value, or not an object (null reads nothing too)
	}
	all := uint32(1)<<len(paths) - 1
	if !s.value(all, 0) {
		return Fields{}
	}
	return f
}

// maxDepth is encoding/json's nesting limit: a value nested deeper is a
// syntax error to it.
const maxDepth = 10000

// scanner walks one JSON value, validating it as encoding/json's scanner
// does and recording the values at its paths.
type scanner struct {
	b     []byte
	i     int
	depth int
	paths [][]string
	out   *Fields
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value scans the value at s.i. active are the paths whose first level
// elements lead to it: those with no more elements end here, the rest go
// on into its members or elements. It reports whether the value is
// well-formed.
func (s *scanner) value(active uint32, level int) bool {
	if s.i >= len(s.b) {
		return false
	}
	var end uint32 // the active paths that end at this value
	if active != 0 {
		for p := range s.paths {
			if active&(1<<p) != 0 && len(s.paths[p]) == level {
				end |= 1 << p
			}
		}
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object(active&^end, level)
	case c == '[':
		return s.array(active&^end, level)
	case c == '"':
		start := s.i
		plain, ok := s.str()
		if !ok {
			return false
		}
		if end != 0 {
			v := field{kind: 's', s: unquote(s.b[start:s.i], plain)}
			s.set(end, v)
		}
		return true
	case c == 't':
		return s.literal("true", end, field{kind: 't'})
	case c == 'f':
		return s.literal("false", end, field{kind: 'f'})
	case c == 'n':
		return s.literal("null", 0, field{})
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	}
	return false
}

func (s *scanner) set(paths uint32, v field) {
	for p := range s.paths {
		if paths&(1<<p) != 0 {
			s.out.vals[p] = v
		}
	}
}

func (s *scanner) literal(lit string, end uint32, v field) bool {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return false
	}
	s.i += len(lit)
	if end != 0 {
		s.set(end, v)
	}
	return true
}

// number scans a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	b, i := s.b, s.i
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	s.i = i
	return true
}

// str scans a JSON string at s.i, its opening quote, to just after its
// closing one; plain is true when it holds only printable ASCII and no
// escape, so that its text is its bytes.
func (s *scanner) str() (plain, ok bool) {
	b, i := s.b, s.i+1
	plain = true
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			s.i = i + 1
			return plain, true
		case c < 0x20:
			return false, false
		case c == '\\':
			plain = false
			i++
			if i >= len(b) {
				return false, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if len(b)-i < 5 {
					return false, false
				}
				for _, h := range b[i+1 : i+5] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return false, false
					}
				}
				i += 5
			default:
				return false, false
			}
		default:
			if c >= utf8.RuneSelf {
				plain = false
			}
			i++
		}
	}
	return false, false
}

// unquote is the text of a well-formed JSON string as encoding/json
// decodes it.
func unquote(q []byte, plain bool) string {
	if plain {
		return string(q[1 : len(q)-1])
	}
	var s string
	json.Unmarshal(q, &s) // well-formed: it cannot fail
	return s
}

func (s *scanner) enter() bool {
	s.depth++
	return s.depth <= maxDepth
}

// open enters the object or array at s.i (its opening byte) and reports
// whether it is empty, close following at once, which leaves it again; ok
// is false past the nesting limit.
func (s *scanner) open(close byte) (empty, ok bool) {
	if !s.enter() {
		return false, false
	}
	s.i++
	s.space()
	if s.i < len(s.b) && s.b[s.i] == close {
		s.i++
		s.depth--
		return true, true
	}
	return false, true
}

// next reads what follows a member or an element: a comma and the space
// after it (more to come), or close, which leaves the object or array
// (more false, ok true); anything else is not JSON.
func (s *scanner) next(close byte) (more, ok bool) {
	s.space()
	if s.i >= len(s.b) {
		return false, false
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		s.space()
		return true, true
	case close:
		s.i++
		s.depth--
		return false, true
	}
	return false, false
}

// object scans an object; active are the paths that go on into its
// members.
func (s *scanner) object(active uint32, level int) bool {
	if empty, ok := s.open('}'); !ok || empty {
		return ok
	}
	for {
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return false
		}
		start := s.i
		plain, ok := s.str()
		if !ok {
			return false
		}
		var sub uint32 // the paths through this member
		if active != 0 {
			sub = s.member(active, level, s.b[start+1:s.i-1], plain)
			// A name given twice is its last value: what an earlier one
			// held is gone.
			s.set(sub, field{})
		}
		s.space()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		s.space()
		if !s.value(sub, level+1) {
			return false
		}
		if more, ok := s.next('}'); !more {
			return ok
		}
	}
}

// member returns the active paths whose element at level is the member
// name (its quoted bytes, without the quotes).
func (s *scanner) member(active uint32, level int, name []byte, plain bool) uint32 {
	var sub uint32
	var text string
	unquoted := false
	for p := range s.paths {
		if active&(1<<p) == 0 {
			continue
		}
		if plain {
			if string(name) == s.paths[p][level] {
				sub |= 1 << p
			}
			continue
		}
		if !unquoted {
			text, unquoted = unquote(s.b[s.i-len(name)-2:s.i], false), true
		}
		if text == s.paths[p][level] {
			sub |= 1 << p
		}
	}
	return sub
}

// array scans an array; active are the paths that go on into its
// elements, each element the index strconv.Atoi reads in its element at
// level.
func (s *scanner) array(active uint32, level int) bool {
	if empty, ok := s.open(']'); !ok || empty {
		return ok
	}
	for n := 0; ; n++ {
		var sub uint32
		if active != 0 {
			for p := range s.paths {
				if active&(1<<p) != 0 {
					if i, err := strconv.Atoi(s.paths[p][level]); err == nil && i == n {
						sub |= 1 << p
					}
				}
			}
		}
		if !s.value(sub, level+1) {
			return false
		}
		if more, ok := s.next(']'); !more {
			return ok
		}
	}
}
