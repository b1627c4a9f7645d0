package mcp

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
)

// Schemas. tools/list is what every agent pays for in context on every
// session, and every client must accept it, so the schemas follow three
// rules:
//
//   - No boolean schemas anywhere. jsonschema-go writes "true" for an empty
//     schema (its "any JSON") and "false" for a closed object's
//     additionalProperties; the MCP schema types every property schema as an
//     object, and the TypeScript SDK 1.x refuses a tool list holding "true".
//     Any JSON is {"description": "any JSON value"}; input objects are not
//     closed in the schema, but decodeArgs still refuses an unknown argument,
//     naming it.
//   - Input schemas are derived from the engine's request types, with one
//     documented field per property (toolSpec.fields), each with one type:
//     a pointer is optional, never null.
//   - Output schemas are derived from the result types too, but list only
//     the fields an agent acts on (toolSpec.output): the other fields are
//     still returned (but by report, whose answer is only those: reported),
//     and allowed, since output objects are not closed either. A listed
//     field the type lacks panics at start (and so in every test), so the
//     schema cannot drift from the type; every result the tests produce is
//     validated against it.

// anyJSON is the schema of a field that holds any JSON value.
func anyJSON() *jsonschema.Schema { return &jsonschema.Schema{Description: "any JSON value"} }

var (
	rawMessageType = reflect.TypeFor[json.RawMessage]()
	timeType       = reflect.TypeFor[time.Time]()
)

// inputSchema infers the input schema of a tool from its request type.
func inputSchema[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](&jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		rawMessageType: anyJSON(),
	}})
	if err != nil {
		panic(fmt.Sprintf("schema for %T: %v", *new(T), err))
	}
	openAndSingleTyped(s)
	return s
}

// openAndSingleTyped removes jsonschema-go's boolean additionalProperties
// from closed objects and turns its ["null", T] for pointers into T.
func openAndSingleTyped(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Not != nil {
		s.AdditionalProperties = nil // false: closed
	}
	if len(s.Types) == 2 && s.Types[0] == "null" {
		s.Type, s.Types = s.Types[1], nil
	}
	for _, p := range s.Properties {
		openAndSingleTyped(p)
	}
	openAndSingleTyped(s.Items)
	openAndSingleTyped(s.AdditionalProperties)
}

// fields names the properties an output schema lists; a property's own
// fields (or, for an array, its items' fields) may be listed in turn.
type fields map[string]fields

// outputSchema derives the output schema of a tool from its result type,
// listing only the properties in keep.
func outputSchema[T any](keep fields) *jsonschema.Schema {
	return schemaOf(reflect.TypeFor[T](), false, keep, reflect.TypeFor[T]().String())
}

// schemaOf is the schema of a value of type t; omitempty says the field is
// left out rather than written as null when empty.
func schemaOf(t reflect.Type, omitempty bool, keep fields, path string) *jsonschema.Schema {
	nullable := !omitempty
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	} else if t.Kind() != reflect.Slice && t.Kind() != reflect.Map {
		nullable = false
	}
	s := &jsonschema.Schema{}
	switch {
	case t == rawMessageType:
		return anyJSON()
	case t == timeType:
		s.Type = "string"
	case t.Kind() == reflect.String:
		s.Type = "string"
	case t.Kind() == reflect.Bool:
		s.Type = "boolean"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		s.Type = "integer"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		s.Type = "number"
	case t.Kind() == reflect.Slice:
		s.Type = "array"
		if keep != nil {
			s.Items = schemaOf(t.Elem(), true, keep, path+"[]")
		}
	case t.Kind() == reflect.Map:
		s.Type = "object"
	case t.Kind() == reflect.Struct:
		s.Type = "object"
		if keep == nil {
			break
		}
		all := jsonFields(t)
		s.Properties = map[string]*jsonschema.Schema{}
		for name, sub := range keep {
			f, ok := all[name]
			if !ok {
				panic(fmt.Sprintf("output schema: %s has no field %q", path, name))
			}
			s.Properties[name] = schemaOf(f.typ, f.omitempty, sub, path+"."+name)
			if !f.omitempty {
				s.Required = append(s.Required, name)
			}
		}
		slices.Sort(s.Required)
	default:
		panic(fmt.Sprintf("output schema: %s: no schema for %s", path, t))
	}
	if nullable {
		s.Types, s.Type = []string{"null", s.Type}, ""
	}
	return s
}

type jsonField struct {
	typ       reflect.Type
	omitempty bool
}

// jsonFields returns the fields encoding/json writes for a struct, by name,
// with those of embedded structs.
func jsonFields(t reflect.Type) map[string]jsonField {
	out := map[string]jsonField{}
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for n, sub := range jsonFields(f.Type) {
				if _, ok := out[n]; !ok {
					out[n] = sub
				}
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		omit := slices.Contains(strings.Split(opts, ","), "omitempty") || slices.Contains(strings.Split(opts, ","), "omitzero")
		out[name] = jsonField{typ: f.Type, omitempty: omit}
	}
	return out
}

// schemaJSON is a schema's JSON, encoded once (see addTool).
func schemaJSON(s *jsonschema.Schema) json.RawMessage {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("encoding a schema: %v", err))
	}
	return b
}
