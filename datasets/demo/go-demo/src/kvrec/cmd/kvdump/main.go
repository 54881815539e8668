// Command kvdump prints the records of a kvrec file.
// Exit status: 0 ok, 1 invalid input, 64 usage or I/O error.
package main

import (
	"fmt"
	"os"

	"example.invalid/kvrec"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: kvdump FILE")
		os.Exit(64)
	}
	data, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvdump:", err)
		os.Exit(64)
	}
	recs, err := kvrec.Parse(data)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvdump: invalid input:", err)
		os.Exit(1)
	}
	for _, r := range recs {
		fmt.Printf("%s=%q\n", r.Key, r.Value)
	}
}
