package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWithAppNamesTheSessionsInEitherDSNForm(t *testing.T) {
	for dsn, want := range map[string]string{
		"postgres://u@h/db":                 "postgres://u@h/db?application_name=bench_1-one",
		"postgres://u@h/db?sslmode=disable": "postgres://u@h/db?sslmode=disable&application_name=bench_1-one",
		"host=h dbname=db":                  "host=h dbname=db application_name=bench_1-one",
	} {
		if diff := cmp.Diff(want, withApp(dsn, "bench_1-one")); diff != "" {
			t.Errorf("withApp(%q) (-want +got):\n%s", dsn, diff)
		}
	}
}
