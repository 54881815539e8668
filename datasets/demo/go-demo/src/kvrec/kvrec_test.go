package kvrec

import (
	"errors"
	"testing"
)

func TestParseRecords(t *testing.T) {
	in := []byte("\x04name\x05alice\x03age\x0242\x04note\x00")
	recs, err := Parse(in)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := []struct{ key, value string }{{"name", "alice"}, {"age", "42"}, {"note", ""}}
	if len(recs) != len(want) {
		t.Fatalf("got %d records, want %d", len(recs), len(want))
	}
	for i, w := range want {
		if recs[i].Key != w.key || string(recs[i].Value) != w.value {
			t.Errorf("record %d = %q:%q, want %q:%q", i, recs[i].Key, recs[i].Value, w.key, w.value)
		}
	}
}

func TestParseEmpty(t *testing.T) {
	recs, err := Parse(nil)
	if err != nil || len(recs) != 0 {
		t.Fatalf("Parse(nil) = %v, %v; want no records", recs, err)
	}
}

func TestParseMalformed(t *testing.T) {
	cases := map[string]struct {
		in   string
		want error
	}{
		"empty key":       {"\x00\x01x", ErrEmptyKey},
		"key cut short":   {"\x05ab", ErrTruncated},
		"value cut short": {"\x01k\x04ab", ErrTruncated},
	}
	for name, c := range cases {
		if _, err := Parse([]byte(c.in)); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", name, err, c.want)
		}
	}
}
