package main

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// BenchResult is cel-go's time for one benchmark case.
type BenchResult struct {
	ID   string  `json:"id"`
	Expr string  `json:"expr"`
	NsOp float64 `json:"ns_op"`
}

// Timing parameters, identical on the Rust side: batches of about batchTarget, the median of
// batches batches.
const (
	batchTarget = 20 * time.Millisecond
	batches     = 11
)

func runBench(corpusPath, out string) error {
	c, err := readCorpus(corpusPath)
	if err != nil {
		return err
	}
	env, err := kubernetesEnv(c.Variables)
	if err != nil {
		return err
	}
	acts, err := activations(c)
	if err != nil {
		return err
	}
	var results []BenchResult
	for _, cs := range c.Cases {
		if !cs.Bench {
			continue
		}
		ast, iss := env.Compile(cs.Expr)
		if iss.Err() != nil {
			return fmt.Errorf("%s: %w", cs.ID, iss.Err())
		}
		prg, err := env.Program(ast, programOptions...)
		if err != nil {
			return fmt.Errorf("%s: %w", cs.ID, err)
		}
		vars := acts[cs.Bind]
		ctx := context.Background()
		run := func(n int) time.Duration {
			start := time.Now()
			for i := 0; i < n; i++ {
				_, _, _ = prg.ContextEval(ctx, vars)
			}
			return time.Since(start)
		}
		ns := measure(run)
		fmt.Printf("%-28s %10.0f ns/op\n", cs.ID, ns)
		results = append(results, BenchResult{ID: cs.ID, Expr: cs.Expr, NsOp: ns})
	}
	return writeJSON(out, map[string]any{"results": results})
}

// measure calibrates a batch size and returns the median ns/op over the batches.
func measure(run func(n int) time.Duration) float64 {
	n := 1
	for {
		d := run(n)
		if d >= batchTarget/4 {
			n = int(float64(n) * float64(batchTarget) / float64(d))
			break
		}
		n *= 4
	}
	if n < 1 {
		n = 1
	}
	samples := make([]float64, batches)
	for i := range samples {
		samples[i] = float64(run(n).Nanoseconds()) / float64(n)
	}
	sort.Float64s(samples)
	return samples[batches/2]
}
