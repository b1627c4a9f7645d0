package config

import (
	"strings"
	"testing"
)

func TestListenTransparent(t *testing.T) {
	if Default().Listen.Transparent != "" {
		t.Fatal("transparent mode must be off by default")
	}
	for _, c := range []struct {
		name, value string
		ok          bool
	}{
		{"IPv4 loopback", "127.0.0.1:15001", true},
		{"IPv6 loopback", "[::1]:15001", true},
		{"localhost", "localhost:15001", true},
		{"beyond loopback", "0.0.0.0:15001", false},
		{"no port", "127.0.0.1", false},
		{"port zero", "127.0.0.1:0", false},
		{"port too large", "127.0.0.1:70000", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := "data_dir: /tmp/x\nlisten:\n  transparent: \"" + c.value + "\"\n"
			cfg, err := Parse(strings.NewReader(file), "t.yaml")
			if c.ok {
				if err != nil || cfg.Listen.Transparent != c.value {
					t.Fatalf("%q: %v", c.value, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "t.yaml:3: listen.transparent:") || !strings.Contains(err.Error(), "loopback") {
				t.Fatalf("%q: %v, want a problem at line 3", c.value, err)
			}
		})
	}
}
