// Package kvrec reads kvrec files: a sequence of key/value records, each
//
//	klen (1 byte) | key (klen bytes) | vlen (1 byte) | value (vlen bytes)
//
// An empty input holds no records.
package kvrec

import (
	"errors"
	"fmt"
)

// Record is one key/value pair.
type Record struct {
	Key   string
	Value []byte
}

// ErrTruncated reports a record that runs past the end of the input.
var ErrTruncated = errors.New("kvrec: truncated record")

// ErrEmptyKey reports a record whose key has length zero.
var ErrEmptyKey = errors.New("kvrec: empty key")

// Parse decodes every record in data. Malformed input yields an error.
func Parse(data []byte) ([]Record, error) {
	var recs []Record
	for i := 0; i < len(data); {
		klen := int(data[i])
		i++
		if klen == 0 {
			return nil, fmt.Errorf("record %d: %w", len(recs), ErrEmptyKey)
		}
		if i+klen > len(data) {
			return nil, fmt.Errorf("record %d: key: %w", len(recs), ErrTruncated)
		}
		key := string(data[i : i+klen])
		i += klen
		vlen := int(data[i])
		i++
		if i+vlen > len(data) {
			return nil, fmt.Errorf("record %d: value: %w", len(recs), ErrTruncated)
		}
		value := append([]byte(nil), data[i:i+vlen]...)
		i += vlen
		recs = append(recs, Record{Key: key, Value: value})
	}
	return recs, nil
}
