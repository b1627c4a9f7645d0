package vendors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Stamp puts key where rule says: a header (replacing any the caller sent),
// or a top-level field of a JSON object body, rewriting only that field so
// the rest of the body stays byte for byte as the caller wrote it. It
// returns the body to send.
func Stamp(rule KeyRule, header http.Header, body []byte, key string) ([]byte, error) {
	switch rule.Location {
	case InHeader:
		header.Set(rule.Name, key)
		return body, nil
	case InBody:
		return setTopLevelString(body, rule.Name, key)
	}
	return body, nil
}

// setTopLevelString sets field of the JSON object in body to value.
func setTopLevelString(body []byte, field, value string) ([]byte, error) {
	quoted, _ := json.Marshal(value)
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("body is not a JSON object")
	}
	open := int(dec.InputOffset())
	empty := !dec.More()
	start, end := -1, -1
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("body is not valid JSON: %w", err)
		}
		afterKey := int(dec.InputOffset())
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("body is not valid JSON: %w", err)
		}
		if tok == field {
			if start >= 0 {
				return nil, fmt.Errorf("body has %q twice", field)
			}
			start, end = afterKey, int(dec.InputOffset())
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("body is not valid JSON: %w", err)
	}
	if len(bytes.Trim(body[dec.InputOffset():], " \t\r\n")) > 0 { // JSON whitespace only
		return nil, errors.New("body has data after the JSON object")
	}
	var out bytes.Buffer
	if start >= 0 {
		out.Write(body[:start])
		out.WriteByte(':')
		out.Write(quoted)
		out.Write(body[end:])
		return out.Bytes(), nil
	}
	fieldJSON, _ := json.Marshal(field)
	out.Write(body[:open])
	out.Write(fieldJSON)
	out.WriteByte(':')
	out.Write(quoted)
	if !empty {
		out.WriteByte(',')
	}
	out.Write(body[open:])
	return out.Bytes(), nil
}
