package config_test

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/internal/config"
)

// yamlKeys lists the dotted paths of every key t reads from YAML ("[]" for
// a list's items, "<name>" for a map's keys), walking structs, pointers,
// lists and maps; a type that decodes itself (a duration) is one key.
func yamlKeys(t reflect.Type, path string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Slice:
		yamlKeys(t.Elem(), path+"[]", out)
		return
	case reflect.Map:
		yamlKeys(t.Elem(), path+".<name>", out)
		return
	case reflect.Struct:
	default:
		return
	}
	if t.PkgPath() == "time" {
		return
	}
	for f := range t.Fields() {
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		switch {
		case name == "-" || !f.IsExported():
			continue
		case strings.Contains(opts, "inline"):
			yamlKeys(f.Type, path, out)
			continue
		case name == "":
			name = strings.ToLower(f.Name) // yaml.v3's default
		}
		p := strings.TrimPrefix(path+"."+name, ".")
		*out = append(*out, p)
		yamlKeys(f.Type, p, out)
	}
}

// TestExampleConfigHasEveryKey: configs/ratchet.example.yaml is where a
// user finds the settings, so every key Config reads is written there,
// set or commented out ("key:" after "#", "-", "{" or "," or none), or,
// for the second of a pair such as token_env and token_file, named beside
// the first as "(or token_file)".
// A key added to the types and not to the example fails here.
func TestExampleConfigHasEveryKey(t *testing.T) {
	b, err := os.ReadFile("../../configs/ratchet.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	example := string(b)
	var keys []string
	yamlKeys(reflect.TypeFor[config.Config](), "", &keys)
	if len(keys) < 50 {
		t.Fatalf("found %d keys in config.Config; the walk is broken", len(keys))
	}
	for _, k := range keys {
		name := k[strings.LastIndex(k, ".")+1:]
		name = strings.TrimSuffix(name, "[]")
		if strings.HasSuffix(name, "<name>") {
			continue // a map's keys are the user's
		}
		q := regexp.QuoteMeta(name)
		re := regexp.MustCompile(`(?m)(^|[\s#{,-])` + q + `:(\s|$)|\(or ` + q + `\)`)
		if !re.MatchString(example) {
			t.Errorf("config key %s is not in configs/ratchet.example.yaml", k)
		}
	}
}
