package docscheck

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/ratchet-mcp/ratchet/internal/config"
)

// configType is the config file's schema: the yaml tags of config.Config.
var configType = reflect.TypeFor[config.Config]()

var unmarshaler = reflect.TypeFor[yaml.Unmarshaler]()

// ConfigRoots returns the config file's top-level keys.
func ConfigRoots() map[string]bool {
	roots := map[string]bool{}
	for _, f := range fields(configType) {
		roots[f.name] = true
	}
	return roots
}

type field struct {
	name string
	typ  reflect.Type
}

// fields lists a struct's yaml keys, with inlined structs' keys in place.
func fields(t reflect.Type) []field {
	var out []field
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case name == "-":
		case strings.Contains(opts, "inline"):
			out = append(out, fields(f.Type)...)
		case name == "":
			out = append(out, field{strings.ToLower(f.Name), f.Type})
		default:
			out = append(out, field{name, f.Type})
		}
	}
	return out
}

// leaf reports whether t is a value in the file rather than a block of
// keys: a scalar, or a type that reads itself (config.Duration).
func leaf(t reflect.Type) bool {
	return t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(unmarshaler)
}

// CheckKey returns an error naming the first part of a dotted key
// ("proxy.upstreams.stripe", "auth.agents.namespace": a list's items are
// stepped into, a map's keys are any) that the config file does not have.
func CheckKey(key string) error {
	t := configType
	parts := strings.Split(key, ".")
	for i, p := range parts {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() == reflect.Map {
			t = t.Elem() // p is a map key, e.g. a vendor under proxy.upstreams
			continue
		}
		if leaf(t) {
			return fmt.Errorf("%s is a value, so it has no key %q", strings.Join(parts[:i], "."), p)
		}
		var next reflect.Type
		for _, f := range fields(t) {
			if f.name == p {
				next = f.typ
			}
		}
		if next == nil {
			where := "the config file"
			if i > 0 {
				where = strings.Join(parts[:i], ".")
			}
			return fmt.Errorf("%s has no key %q", where, p)
		}
		t = next
	}
	return nil
}

// CheckConfigSnippet decodes a YAML snippet into the config schema, with
// unknown keys refused as the config loader refuses them. It checks the
// keys and the shapes of the values, not their validity (a snippet may
// name files that exist only in a deployment).
func CheckConfigSnippet(text string) error {
	dec := yaml.NewDecoder(bytes.NewReader([]byte(text)))
	dec.KnownFields(true)
	var cfg config.Config
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}
