// Command differential is the cel-go side of celgate's CEL differential test and benchmark.
//
//	differential gen -out corpus.json                 # write the generated corpus
//	differential oracle -corpus c.json -out r.json    # evaluate every case with cel-go
//	differential bench -corpus c.json -out b.json     # time the benchmark cases with cel-go
//	differential seeds -out dir                       # write each expression as a fuzzing seed
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: differential gen|oracle|bench|seeds [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	out := fs.String("out", "", "output file (required)")
	corpusPath := fs.String("corpus", "", "corpus file (oracle, bench)")
	_ = fs.Parse(os.Args[2:])
	if *out == "" {
		fmt.Fprintln(os.Stderr, "-out is required")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "gen":
		err = writeJSON(*out, generate())
	case "oracle":
		err = runOracle(*corpusPath, *out)
	case "bench":
		err = runBench(*corpusPath, *out)
	case "seeds":
		err = writeSeeds(*out)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "differential:", err)
		os.Exit(1)
	}
}

// writeSeeds writes every corpus expression to its own file in dir (for cargo-fuzz).
func writeSeeds(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i, c := range generate().Cases {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("case%05d", i)), []byte(c.Expr), 0o644); err != nil {
			return err
		}
	}
	return nil
}
