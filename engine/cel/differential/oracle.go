package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/cel/common"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/library"
	"k8s.io/apiserver/pkg/cel/mutation"
)

// Corpus is the differential corpus shared with the Rust side.
type Corpus struct {
	// Variables are declared `dyn` in the environment.
	Variables []string `json:"variables"`
	// Bindings are named sets of variable values (JSON, decoded as Kubernetes decodes objects).
	Bindings map[string]map[string]json.RawMessage `json:"bindings"`
	Cases    []Case                                `json:"cases"`
}

// Case is one expression evaluated against one binding set.
type Case struct {
	ID    string `json:"id"`
	Group string `json:"group"`
	Expr  string `json:"expr"`
	Bind  string `json:"bind,omitempty"`
	Bench bool   `json:"bench,omitempty"`
	// Unordered cases iterate a map: cel-go's order is random, so list order and cost
	// (short-circuits) vary from run to run.
	Unordered bool `json:"unordered,omitempty"`
	// Mutation cases compile in the environment of mutation expressions (the message types
	// Object, Object.<path> and JSONPatch).
	Mutation bool `json:"mutation,omitempty"`
}

// Result is what cel-go did with one case.
type Result struct {
	ID string `json:"id"`
	// CompileError is the issues text when parsing or checking failed.
	CompileError *string `json:"compile_error,omitempty"`
	Type         string  `json:"type,omitempty"`
	Value        any     `json:"value,omitempty"`
	Error        *string `json:"error,omitempty"`
	Cost         *uint64 `json:"cost,omitempty"`
	// Panic is set when cel-go crashed on the case (a cel-go bug): nothing to compare with.
	Panic *string `json:"panic,omitempty"`
}

// perCallLimit is Kubernetes' PerCallLimit (the base environment sets it too).
const perCallLimit = 1_000_000

// programOptions are the options Kubernetes adds when it plans a program; the environment
// brings the rest (OptOptimize, OptTrackCost, the Kubernetes cost estimator).
var programOptions = []cel.ProgramOption{cel.InterruptCheckFrequency(100), cel.CostLimit(perCallLimit)}

// kubernetesEnv is Kubernetes 1.36's CEL environment for new expressions, with the corpus'
// variables declared dyn and the mutating policies' jsonpatch library.
func kubernetesEnv(variables []string) (*cel.Env, error) {
	var opts []cel.EnvOption
	for _, v := range variables {
		opts = append(opts, cel.Variable(v, cel.DynType))
	}
	opts = append(opts, library.JSONPatch())
	set, err := environment.MustBaseEnvSet(version.MajorMinor(1, 36)).Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions:        opts,
	})
	if err != nil {
		return nil, err
	}
	return set.Env(environment.NewExpressions)
}

// mutationEnv is kubernetesEnv with what Kubernetes adds for mutation expressions: the
// dynamic type resolver for Object, Object.<path> and JSONPatch.
func mutationEnv(variables []string) (*cel.Env, error) {
	env, err := kubernetesEnv(variables)
	if err != nil {
		return nil, err
	}
	return env.Extend(common.ResolverEnvOption(&mutation.DynamicTypeResolver{}))
}

func readCorpus(path string) (*Corpus, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c Corpus
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}

// activations decodes every binding set as Kubernetes decodes JSON objects (integers as
// int64, other numbers as float64).
func activations(c *Corpus) (map[string]map[string]any, error) {
	out := map[string]map[string]any{}
	for name, vars := range c.Bindings {
		m := map[string]any{}
		for k, raw := range vars {
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.UseNumber()
			var v any
			if err := dec.Decode(&v); err != nil {
				return nil, fmt.Errorf("binding %s.%s: %w", name, k, err)
			}
			m[k] = numbers(v)
		}
		out[name] = m
	}
	return out, nil
}

func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := strconv.ParseFloat(string(x), 64)
		return f
	case []any:
		for i := range x {
			x[i] = numbers(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = numbers(x[k])
		}
	}
	return v
}

func runOracle(corpusPath, out string) error {
	c, err := readCorpus(corpusPath)
	if err != nil {
		return err
	}
	env, err := kubernetesEnv(c.Variables)
	if err != nil {
		return err
	}
	menv, err := mutationEnv(c.Variables)
	if err != nil {
		return err
	}
	acts, err := activations(c)
	if err != nil {
		return err
	}
	results := make([]Result, 0, len(c.Cases))
	for _, cs := range c.Cases {
		e := env
		if cs.Mutation {
			e = menv
		}
		results = append(results, evalCase(e, cs, acts[cs.Bind]))
	}
	return writeJSON(out, map[string]any{"results": results})
}

func evalCase(env *cel.Env, cs Case, vars map[string]any) (r Result) {
	r.ID = cs.ID
	defer func() {
		if p := recover(); p != nil {
			msg := fmt.Sprintf("panic: %v", p)
			r = Result{ID: cs.ID, Panic: &msg}
		}
	}()
	ast, iss := env.Compile(cs.Expr)
	if iss.Err() != nil {
		msg := iss.Err().Error()
		r.CompileError = &msg
		return r
	}
	r.Type = ast.OutputType().String()
	prg, err := env.Program(ast, programOptions...)
	if err != nil {
		msg := "program: " + err.Error()
		r.CompileError = &msg
		return r
	}
	if vars == nil {
		vars = map[string]any{}
	}
	val, det, err := prg.ContextEval(context.Background(), vars)
	if det != nil {
		r.Cost = det.ActualCost()
	}
	if err != nil {
		msg := err.Error()
		r.Error = &msg
		return r
	}
	r.Value = encode(val)
	return r
}

// maxDepth is how deep encode descends into lists, maps and optionals; deeper values are
// encoded as {"depth": maxDepth} on both sides.
const maxDepth = 40

// encode renders a CEL value as JSON tagged with its kind; the Rust side renders celgate's
// values the same way.
func encode(v ref.Val) any { return encodeAt(v, 0) }

func encodeAt(v ref.Val, depth int) any {
	if depth >= maxDepth {
		return map[string]any{"depth": maxDepth}
	}
	encode := func(v ref.Val) any { return encodeAt(v, depth+1) }
	switch x := v.(type) {
	case types.Null:
		return map[string]any{"null": nil}
	case types.Bool:
		return map[string]any{"bool": bool(x)}
	case types.Int:
		return map[string]any{"int": int64(x)}
	case types.Uint:
		return map[string]any{"uint": uint64(x)}
	case types.Double:
		return map[string]any{"double": strconv.FormatFloat(float64(x), 'g', -1, 64)}
	case types.String:
		return map[string]any{"string": string(x)}
	case types.Bytes:
		return map[string]any{"bytes": base64.StdEncoding.EncodeToString(x)}
	case types.Timestamp:
		return map[string]any{"timestamp": []int64{x.Unix(), int64(x.Nanosecond())}}
	case types.Duration:
		return map[string]any{"duration": x.Nanoseconds()}
	case *types.Optional:
		if !x.HasValue() {
			return map[string]any{"optional": nil}
		}
		return map[string]any{"optional": encode(x.GetValue())}
	case *types.Type:
		return map[string]any{"type": x.TypeName()}
	case traits.Mapper:
		var entries [][2]any
		for it := x.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			entries = append(entries, [2]any{encode(k), encode(x.Get(k))})
		}
		sort.Slice(entries, func(i, j int) bool {
			a, _ := json.Marshal(entries[i][0])
			b, _ := json.Marshal(entries[j][0])
			return string(a) < string(b)
		})
		if entries == nil {
			entries = [][2]any{}
		}
		return map[string]any{"map": entries}
	case traits.Lister:
		items := []any{}
		for it := x.Iterator(); it.HasNext() == types.True; {
			items = append(items, encode(it.Next()))
		}
		return map[string]any{"list": items}
	}
	return map[string]any{"opaque": v.Type().TypeName(), "repr": fmt.Sprint(v.Value())}
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
