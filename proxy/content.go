package proxy

import (
	"encoding/json"
	"slices"
	"unicode/utf8"
)

// marshalContent is json.Marshal(c), byte for byte: written by hand for
// content without a JSON body (a form, a hash or no body: what Stripe's v1
// calls send), which encoding/json would walk by reflection, sorting the
// form's keys through an interface; a JSON body's raw values, which
// json.Marshal compacts and escapes, go through json.Marshal as before.
// TestMarshalContentIsJSONMarshal and FuzzMarshalContent hold it to that.
func marshalContent(c content) []byte {
	if c.JSON != nil {
		b, _ := json.Marshal(c) // strings, maps of strings and raw JSON always encode
		return b
	}
	b := make([]byte, 0, 64+contentSize(c))
	b = append(b, '{')
	if c.BodySHA256 != "" {
		b = appendJSONString(append(b, `"body_sha256":`...), c.BodySHA256)
		b = append(b, ',')
	}
	if c.Form != nil {
		b = append(b, `"form":`...)
		if *c.Form == nil {
			b = append(b, "null"...)
		} else {
			b = append(b, '{')
			keys := make([]string, 0, len(*c.Form))
			for k := range *c.Form {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for i, k := range keys {
				if i > 0 {
					b = append(b, ',')
				}
				b = append(appendJSONString(b, k), ':')
				vs := (*c.Form)[k]
				if vs == nil {
					b = append(b, "null"...)
					continue
				}
				b = append(b, '[')
				for j, v := range vs {
					if j > 0 {
						b = append(b, ',')
					}
					b = appendJSONString(b, v)
				}
				b = append(b, ']')
			}
			b = append(b, '}')
		}
		b = append(b, ',')
	}
	if c.FormSHA256 != "" {
		b = appendJSONString(append(b, `"form_sha256":`...), c.FormSHA256)
		b = append(b, ',')
	}
	if c.JSONSHA256 != "" {
		b = appendJSONString(append(b, `"json_sha256":`...), c.JSONSHA256)
		b = append(b, ',')
	}
	b = appendJSONString(append(b, `"method":`...), c.Method)
	b = appendJSONString(append(b, `,"path":`...), c.Path)
	if c.Scope != "" {
		b = appendJSONString(append(b, `,"scope":`...), c.Scope)
	}
	return append(b, '}')
}

// contentSize is about the bytes of c's strings, to size the buffer once.
func contentSize(c content) int {
	n := len(c.BodySHA256) + len(c.FormSHA256) + len(c.JSONSHA256) + len(c.Method) + len(c.Path) + len(c.Scope)
	if c.Form != nil {
		for k, vs := range *c.Form {
			n += len(k) + 6
			for _, v := range vs {
				n += len(v) + 3
			}
		}
	}
	return n
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as encoding/json's Marshal writes a string:
// quoted; \" \\ \b \f \n \r \t as such, other control characters and
// <, > and & (HTML escaping, Marshal's default) as \u00XX; invalid UTF-8
// as \ufffd; U+2028 and U+2029 as \u2028 and \u2029.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(append(b, s[start:]...), '"')
}
