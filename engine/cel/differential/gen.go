package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// The corpus generator: deterministic, systematic combinations of the standard library's and
// Kubernetes' functions, operators, macros and edge values. A case's id is its group and
// expression (plus ` @binding` when not evaluated against the default binding set), so ids
// stay stable as cases are added.

// defaultBind is the binding set cases use unless they name another.
const defaultBind = "k8s"

type generator struct {
	cases []Case
	seen  map[string]bool
}

func (g *generator) add(group, expr string) { g.addBind(group, expr, defaultBind) }

func (g *generator) addBind(group, expr, bind string) {
	id := group + "/" + expr
	if bind != defaultBind {
		id += " @" + bind
	}
	if g.seen[id] {
		return
	}
	g.seen[id] = true
	g.cases = append(g.cases, Case{ID: id, Group: group, Expr: expr, Bind: bind, Unordered: iteratesMap(expr)})
}

var (
	// iteration matches the macros and functions that iterate a collection in its order.
	iteration = regexp.MustCompile(`\.(all|exists|exists_one|existsOne|map|filter|transformList|transformMap|transformMapEntry|join|sort|sortBy)\(`)
	// multiMap matches a map literal with at least two entries, or a JSON map of the bindings.
	multiMap = regexp.MustCompile(`\{[^{}\[\]]*:[^{}\[\]]*,[^{}\[\]]*\}|object\.metadata\.(labels|annotations)\b|object\.(keys|map|metadata|spec)\.(all|exists|map|filter|transform)|object\.(keys|map)\b`)
)

// iteratesMap reports whether expr may iterate a map with several entries (heuristically).
func iteratesMap(expr string) bool {
	return iteration.MatchString(expr) && multiMap.MatchString(expr)
}

// cross adds tmpl formatted with every combination of the pools' values.
func (g *generator) cross(group, tmpl string, pools ...[]string) {
	var rec func(args []any, rest [][]string)
	rec = func(args []any, rest [][]string) {
		if len(rest) == 0 {
			g.add(group, fmt.Sprintf(tmpl, args...))
			return
		}
		for _, v := range rest[0] {
			rec(append(args[:len(args):len(args)], v), rest[1:])
		}
	}
	rec(nil, pools)
}

func cat(pools ...[]string) []string {
	var out []string
	for _, p := range pools {
		out = append(out, p...)
	}
	return out
}

// q quotes s as a CEL single-quoted string literal.
func q(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`, "\t", `\t`)
	return "'" + r.Replace(s) + "'"
}

func qs(ss ...string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = q(s)
	}
	return out
}

// Value pools.
var (
	ints     = []string{"0", "1", "-1", "7", "9223372036854775807", "-9223372036854775808"}
	uints    = []string{"0u", "1u", "7u", "18446744073709551615u"}
	doubles  = []string{"0.0", "-0.0", "1.5", "-2.5", "7.0", "1e308", "4.9e-324", "double('NaN')", "double('Infinity')", "double('-Infinity')"}
	strs     = qs("", "a", "abc", "Hello, World", "héllo 世界", "🙂x🙂", " padded\t", "a,b,,c", "AbC", "ll")
	bytesL   = []string{"b''", "b'abc'", `b'\xff\x00'`, "b'héllo'"}
	boolsL   = []string{"true", "false"}
	listsL   = []string{"[]", "[1, 2, 3]", "[3, 1, 2]", "['b', 'a']", "[1.5, -0.5]", "[[1], [2, 3]]", "[null]", "[true, false]", "[1, 1, 2]"}
	mapsL    = []string{"{}", "{'a': 1}", "{'a': 1, 'b': 2}", "{1: 'x'}", "{true: 1}", "{'k': [1]}", "{1u: 2u}"}
	times    = []string{"timestamp('2024-01-02T03:04:05Z')", "timestamp('2024-02-29T23:59:59.999999999-08:00')", "timestamp('0001-01-01T00:00:00Z')", "timestamp('9999-12-31T23:59:59.999999999Z')", "timestamp(0)"}
	durs     = []string{"duration('0s')", "duration('1h2m3.5s')", "duration('-1.5s')", "duration('1ns')", "duration('87600h')"}
	dynsL    = []string{"object.spec.replicas", "object.metadata.name", "object.metadata.labels", "object.spec.template.spec.containers", "object.spec.missing", "params.maxReplicas", "request.operation", "oldObject.spec.replicas"}
	typeLits = []string{"int", "uint", "double", "string", "bytes", "bool", "null_type", "list", "map", "type", "google.protobuf.Timestamp", "google.protobuf.Duration", "dyn", "optional_type"}
	// opPool is every kind of operand, for the operator matrix.
	opPool  = []string{"0", "1", "-1", "9223372036854775807", "-9223372036854775808", "0u", "1u", "18446744073709551615u", "0.0", "-0.0", "1.5", "double('NaN')", "double('Infinity')", "''", "'ab'", "'é'", "b'ab'", "true", "null", "[1, 2]", "{'a': 1}", times[0], durs[1], "object.spec.replicas"}
	numPool = []string{"0", "1", "-1", "2", "9223372036854775807", "-9223372036854775808", "0u", "1u", "2u", "18446744073709551615u", "0.0", "1.0", "-1.0", "2.5", "1e19", "-1e19", "double('NaN')", "double('Infinity')", "9.223372036854775807e18", "1.8446744073709552e19"}
	zones   = qs("UTC", "America/Los_Angeles", "Asia/Kolkata", "Australia/Lord_Howe", "+05:30", "-08:00", "02:00", "Nowhere/Invalid", "", "z")
)

func generate() *Corpus {
	g := &generator{seen: map[string]bool{}}
	g.policies()
	g.operators()
	g.logic()
	g.conversions()
	g.stdFunctions()
	g.timeFunctions()
	g.macros()
	g.optionals()
	g.stringsExt()
	g.listsExt()
	g.sets()
	g.regexLib()
	g.urls()
	g.ipCidr()
	g.quantity()
	g.semver()
	g.format()
	g.misc()
	g.edges()
	g.errors()
	g.mutation()
	return &Corpus{
		Variables: []string{"object", "oldObject", "params", "request", "namespaceObject"},
		Bindings:  bindings(),
		Cases:     g.cases,
	}
}

// policies are realistic one-line policy expressions over a Deployment; they are also the
// benchmark cases.
func (g *generator) policies() {
	exprs := []string{
		"object.spec.replicas <= params.maxReplicas",
		"object.metadata.labels.app == 'web'",
		"has(object.metadata.labels) && 'app' in object.metadata.labels",
		"object.spec.template.spec.containers.all(c, c.image.contains(':') && size(c.name) < 64)",
		"!object.spec.template.spec.containers.exists(c, c.image.endsWith(':latest'))",
		"object.spec.template.spec.containers.all(c, c.image.matches('^[a-z0-9.-]+(/[a-z0-9._-]+)+:[a-zA-Z0-9._-]+$'))",
		"object.spec.template.spec.containers.all(c, has(c.resources) && has(c.resources.limits) && 'memory' in c.resources.limits)",
		"object.metadata.?annotations['owner'].orValue('') != ''",
		"object.spec.template.spec.containers.map(c, c.name).size() == 3",
		"'deployment ' + object.metadata.name + ' has ' + string(object.spec.replicas) + ' replicas'",
		"object.spec.template.spec.containers.all(c, params.allowedRegistries.exists(r, c.image.startsWith(r)))",
		"object.spec.template.spec.containers.all(c, !has(c.securityContext) || !has(c.securityContext.privileged) || !c.securityContext.privileged)",
		"request.operation == 'CREATE' || object.spec.replicas == oldObject.spec.replicas",
		"object.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && size(object.metadata.name) <= 63",
		"params.requiredLabels.all(l, l in object.metadata.labels)",
		"object.spec.template.spec.containers.map(c, c.name).exists_one(n, n == 'app')",
		"object.spec.template.spec.containers.filter(c, has(c.env) && c.env.exists(e, e.name == 'DEBUG')).size() == 0",
		"object.metadata.labels.all(k, k.startsWith('app') || k.matches('^[a-z.]+/[a-z-]+$'))",
		"object.spec.strategy.type in ['RollingUpdate', 'Recreate']",
		"object.spec.template.spec.containers.all(c, c.image.split(':').size() == 2)",
		"object.spec.template.spec.containers.all(c, c.name.lowerAscii() == c.name)",
		"request.userInfo.groups.exists(g, g == 'system:masters') || object.spec.replicas <= 3",
		"object.spec.template.spec.?securityContext.?runAsNonRoot.orValue(false) == true",
		"object.spec.template.spec.containers.all(i, c, i < 10 && c.name != '')",
		"object.metadata.labels.transformMap(k, v, v.upperAscii()).size() > 0",
		"'deployment ' + object.metadata.name + ' in ' + request.namespace + ' exceeds ' + string(params.maxReplicas) + ' replicas'",
		"object.spec.template.spec.containers.all(c, c.ports.all(p, p.containerPort > 1024 && p.containerPort < 65536))",
		"sets.contains(params.allowedRegistries, object.spec.template.spec.containers.map(c, c.image.split('/')[0] + '/'))",
		"timestamp(object.metadata.creationTimestamp) < timestamp('2030-01-01T00:00:00Z')",
		"object.spec.template.spec.containers.all(c, isQuantity(c.resources.limits.cpu))",
		"object.spec.template.spec.containers.all(c, quantity(c.resources.limits.memory).compareTo(quantity('1Gi')) <= 0)",
		"object.spec.template.spec.containers.all(c, url('https://' + c.image).getHost() != '')",
		"object.spec.template.spec.containers.map(c, c.image.substring(c.image.lastIndexOf(':') + 1)).all(t, t != 'latest')",
		"object.spec.template.spec.volumes.all(v, !has(v.hostPath))",
	}
	for _, e := range exprs {
		g.add("policy", e)
		g.cases[len(g.cases)-1].Bench = true
	}
}

func (g *generator) operators() {
	bin := []string{"+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">="}
	for _, op := range bin {
		verb := strings.ReplaceAll(op, "%", "%%")
		g.cross("op/"+opName(op), "%s "+verb+" %s", opPool, opPool)
		g.cross("op-dyn/"+opName(op), "dyn(%s) "+verb+" dyn(%s)", numPool, numPool)
	}
	g.cross("op/in", "%s in %s", opPool, []string{"[1, 2]", "[1.0, 'a']", "['ab', 'é']", "{'a': 1}", "{1: 2}", "[]", "{}", "[null]", "dyn([1u, 2.5])"})
	g.cross("op/in-dyn", "dyn(%s) in [dyn(1), dyn(2u), dyn(3.5)]", numPool)
	g.cross("op/in-dyn", "dyn(%s) in {1: 'a', 2u: 'b'}", numPool)
	g.cross("op/neg", "-%s", opPool)
	g.cross("op/neg", "-(%s)", ints)
	g.cross("op/not", "!%s", opPool)
	g.cross("op/index", "%s[%s]", []string{"[1, 2, 3]", "'abc'", "{'a': 1, 'b': 2}", "{1: 'one', 2: 'two'}", "{true: 'y'}", "[]", "object.spec.template.spec.containers", "object.metadata.labels"},
		[]string{"0", "1", "2", "3", "-1", "0u", "1u", "1.0", "1.5", "'a'", "'app'", "true", "null", "dyn(2u)", "dyn(0.0)"})
	g.cross("op/select", "%s.a", []string{"{'a': 1}", "{'b': 1}", "{}", "dyn(1)", "dyn('a')", "dyn([1])", "{'a': {'a': 2}}"})
	g.cross("op/concat", "%s + %s", listsL, listsL)
	g.cross("op/concat", "%s + %s", strs, strs[:4])
	g.cross("op/concat", "%s + %s", bytesL, bytesL)
	g.cross("op/time", "%s + %s", times, durs)
	g.cross("op/time", "%s - %s", times, durs)
	g.cross("op/time", "%s - %s", times, times)
	g.cross("op/time", "%s + %s", durs, durs)
	g.cross("op/time", "%s - %s", durs, durs)
	g.cross("op/time", "%s < %s", durs, durs)
	g.cross("op/time", "%s == %s", times, times)
	g.cross("op/eq-agg", "%s == %s", cat(listsL, mapsL), cat(listsL, mapsL))
	g.cross("op/eq-agg", "dyn(%s) == dyn(%s)", []string{"[1, 2]", "[1u, 2u]", "[1.0, 2.0]", "{'a': 1}", "{'a': 1.0}", "{1: 'a'}", "{1u: 'a'}", "{1.0: 'a'}", "[double('NaN')]", "[[]]", "[{}]"}, []string{"[1, 2]", "[1u, 2u]", "[1.0, 2.0]", "{'a': 1}", "{'a': 1.0}", "{1: 'a'}", "{1u: 'a'}", "[double('NaN')]", "[[]]"})
	g.cross("op/eq-type", "%s == %s", typeLits, typeLits[:6])
	g.cross("op/eq-type", "type(%s) == %s", opPool, []string{"int", "uint", "double", "string", "dyn"})
	g.cross("op/ternary", "%s ? %s : %s", []string{"true", "false", "1 == 1", "dyn(1)", "null", "1/0 == 1", "object.spec.missing"}, []string{"1", "'a'", "1/0"}, []string{"2", "'b'", "1/0"})
	g.cross("op/arith-overflow", "%s", []string{
		"9223372036854775807 + 1", "-9223372036854775808 - 1", "9223372036854775807 * 2", "-9223372036854775808 * -1", "-9223372036854775808 / -1", "-9223372036854775808 % -1",
		"-(-9223372036854775808)", "18446744073709551615u + 1u", "0u - 1u", "18446744073709551615u * 2u", "1 / 0", "1 % 0", "1u / 0u", "1u % 0u", "1.0 / 0.0", "-1.0 / 0.0", "0.0 / 0.0",
		"5 % -3", "-5 % 3", "-5 / 2", "5.5 % 2.0", "7 / 2", "1e308 * 10.0", "object.spec.replicas * 9223372036854775807", "object.spec.replicas - 9223372036854775807 - 10",
		"duration('9223372036s') + duration('9223372036s')", "timestamp('9999-12-31T23:59:59Z') + duration('1s')", "timestamp('0001-01-01T00:00:00Z') - duration('1s')",
		"timestamp('9999-12-31T23:59:59Z') - timestamp('0001-01-01T00:00:00Z')", "duration('-9223372036s') - duration('9223372036s')",
	})
	g.cross("op/precedence", "%s", []string{"1 + 2 * 3", "(1 + 2) * 3", "-1 - -1", "!!true", "--1", "1 < 2 == true", "1 + 2 == 3 && 4 - 1 == 3", "true || false && false", "2 * 3 % 4", "1 - 2 - 3", "100 / 10 / 5", "'a' + 'b' == 'ab' ? 1 : 2", "true ? false ? 1 : 2 : 3", "[1, 2][1] + {'a': 3}['a']", "---1", "!-1 == 1"})
}

func opName(op string) string {
	return map[string]string{"+": "add", "-": "sub", "*": "mul", "/": "div", "%": "mod", "==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}[op]
}

func (g *generator) logic() {
	vals := []string{"true", "false", "(1/0 == 1)", "dyn(1)", "object.spec.missing", "dyn(null)", "(object.spec.replicas > 1)"}
	g.cross("logic/and", "%s && %s", vals, vals)
	g.cross("logic/or", "%s || %s", vals, vals)
	g.cross("logic/chain", "%s && %s || %s", vals[:4], vals[:4], vals[:4])
	g.cross("logic/chain", "%s || %s && %s", vals[:4], vals[:4], vals[:4])
	g.cross("logic/not", "!(%s)", vals)
	g.cross("logic/long", "%s", []string{
		"true && true && true && true && false", "false || false || false || true", "[1, 2].all(x, x > 0) && [].exists(x, x > 0) || true",
		"(1/0 == 1) || (1/0 == 2)", "(1/0 == 1) && (1 % 0 == 2)", "!(1/0 == 1) || true",
	})
}

func (g *generator) conversions() {
	g.cross("conv/int", "int(%s)", cat(ints, uints, doubles, qs("42", "-1", "9223372036854775807", "9223372036854775808", "-9223372036854775809", "1.5", " 1", "0x10", "", "+5", "1e3", "٣"), times, []string{"true", "null", "[1]", "dyn('7')", "object.spec.replicas", "9.223372036854775807e18", "-9.223372036854776e18", "1e19", "-1.5", "2.9"}))
	g.cross("conv/uint", "uint(%s)", cat(ints, uints, doubles, qs("42", "-1", "18446744073709551615", "18446744073709551616", "1.5", "", "0x10", "+5"), []string{"true", "dyn(-1)", "1.8446744073709552e19", "1.8446744073709550e19", "-0.5", "0.9"}))
	g.cross("conv/double", "double(%s)", cat(ints, uints, doubles, qs("1.5", "1e3", "NaN", "nan", "inf", "-Infinity", "+Infinity", "abc", "", " 1", "1_000", "0x1p-2", "1e400", "-0"), []string{"true", "null", "dyn('2.5')"}))
	g.cross("conv/string", "string(%s)", cat(ints, uints, doubles, strs, bytesL, boolsL, times, durs, []string{"null", "[1]", "{'a': 1}", "int", "type(1)", "dyn(1.0)", "1e21", "1e-7", "123456789.0", "0.1", "100.0", "1e20", "-1e-5", "1.0e100", "3.14159"}))
	g.cross("conv/bytes", "bytes(%s)", cat(strs, bytesL, []string{"1", "null", "dyn('x')"}))
	g.cross("conv/bool", "bool(%s)", cat(boolsL, qs("true", "false", "t", "f", "TRUE", "False", "1", "0", "yes", "", "T", "FALSE", "tRuE"), []string{"1", "null", "dyn('true')"}))
	g.cross("conv/type", "type(%s)", cat(ints[:2], uints[:2], doubles[:2], strs[:2], bytesL[:2], boolsL, listsL[:3], mapsL[:3], times[:1], durs[:1], typeLits, []string{"null", "object", "object.spec.replicas", "object.metadata", "optional.of(1)", "optional.none()", "type(type(1))"}))
	g.cross("conv/dyn", "dyn(%s)", cat(ints[:2], strs[:2], listsL[:2], mapsL[:2], []string{"null", "dyn(1)", "object"}))
	g.cross("conv/timestamp", "timestamp(%s)", cat(qs("2024-01-02T03:04:05Z", "2024-01-02T03:04:05.123456789Z", "2024-01-02T03:04:05+01:00", "2024-01-02T03:04:05.5-08:00", "2024-01-02T03:04:05", "2024-01-02", "2024-13-02T03:04:05Z", "2024-02-30T00:00:00Z", "0000-01-01T00:00:00Z", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999Z", "10000-01-01T00:00:00Z", "2024-01-02t03:04:05z", "2024-01-02T03:04:05.1234567891Z", "2024-01-02T24:00:00Z", "2016-12-31T23:59:60Z", "", "now", "2024-01-02T03:04:05+24:00", "2024-01-02 03:04:05Z"),
		[]string{"0", "1", "-1", "-62135596800", "-62135596801", "253402300799", "253402300800", "9223372036854775807", times[0], "dyn('2024-01-02T03:04:05Z')", "object.metadata.creationTimestamp"}))
	g.cross("conv/duration", "duration(%s)", cat(qs("0", "0s", "1s", "-1s", "1.5s", "1h", "1h30m", "1m1s1ms1us1ns", "1µs", "1μs", "100ms", "2562047h47m16.854775807s", "2562047h47m16.854775808s", "-2562047h47m16.854775808s", "315576000000s", "315576000001s", "1d", "", "s", "1", "1.s", ".5s", "+5s", "1h-1m", "1e3s", "-0s", "3.000000001s", "0.0000000001s",
		// Long fractions keep the digits that fit in 63 bits and scale in float64, as Go does.
		"1h2m3.444444444444444444444444444444444444444444444444444444444444444444444445s", "0.1234567890123456789012345h", "0.3333333333333333333h", "0.1h", "0.7h", "0.29h", "1.7m", "12.3456789012345678901234567890m",
		"0.9999999999999999999999s", "1.000000000000000000001ns", "0.00000000000000000001h", "2562047.788015215h", "2562047.7880152155h", "0.000000000000000000000000000000000000009s",
		"9223372036854775807ns", "9223372036854775808ns", "-9223372036854775808ns", "92233720368547758070ns", "99999999999999999999s", "-2562047h47m16.854775809s"),
		[]string{durs[1], "dyn('1s')", "1", "object.metadata.name"}))
	g.cross("conv/int-time", "int(%s)", durs)
	g.cross("conv/time-string", "string(%s)", []string{"timestamp('2024-01-02T03:04:05.120Z')", "timestamp('2024-01-02T03:04:05.000000001+05:30')", "duration('1.000001s')", "duration('-0.5s')", "duration('90m')", "duration('1ms')", "duration('0s')", "duration('1.100s')"})
}

func (g *generator) stdFunctions() {
	sized := cat(strs, bytesL, listsL, mapsL, []string{"object.metadata.labels", "object.spec.template.spec.containers", "object.metadata.name", "1", "null", "dyn(1)", "'\\u0000'", "'\\U0001F600'"})
	g.cross("std/size", "size(%s)", sized)
	g.cross("std/size", "%s.size()", sized)
	subs := qs("", "a", "l", "é", "世界", "Hello", "x🙂", "zz", "A")
	g.cross("std/contains", "%s.contains(%s)", strs, subs)
	g.cross("std/startsWith", "%s.startsWith(%s)", strs, subs)
	g.cross("std/endsWith", "%s.endsWith(%s)", strs, subs)
	g.cross("std/contains", "%s.contains(%s)", []string{"dyn(1)", "object.metadata.name", "object.spec.replicas"}, qs("w", ""))
	res := qs("", "a", "^a.*c$", "[", "(?i)abc", `\d+`, "é", "^$", ".*", "^[a-z]+$", "a{2,}", "(a|b)+", `\p{L}+`, "(?P<n>a)", `\bWorld\b`, "a**", `(?s).`, "^.{3}$", `\x{1F642}`, "[[:alpha:]]+", "(?U)a+", "a{1001}")
	g.cross("std/matches", "%s.matches(%s)", strs, res)
	g.cross("std/matches", "matches(%s, %s)", strs[:3], res[:6])
	g.cross("std/matches", "%s.matches(%s)", []string{"object.metadata.name"}, []string{"object.metadata.name", "'^w'", "dyn('[')"})
}

func (g *generator) timeFunctions() {
	accessors := []string{"getFullYear", "getMonth", "getDayOfYear", "getDayOfMonth", "getDate", "getDayOfWeek", "getHours", "getMinutes", "getSeconds", "getMilliseconds"}
	tsPool := cat(times, []string{"timestamp('2024-12-31T23:30:00-05:00')", "timestamp('2023-03-12T10:00:00Z')"})
	for _, a := range accessors {
		g.cross("time/"+a, "%s."+a+"()", tsPool)
		g.cross("time/"+a, "%s."+a+"(%s)", tsPool[:3], zones)
		g.cross("time/"+a, "%s."+a+"(%s)", tsPool[5:], zones[:6])
	}
	for _, a := range []string{"getHours", "getMinutes", "getSeconds", "getMilliseconds"} {
		g.cross("time/duration-"+a, "%s."+a+"()", cat(durs, []string{"duration('-90m30.25s')", "duration('25h')"}))
	}
	g.cross("time/dyn", "dyn(%s).getFullYear()", []string{times[0], durs[0], "1", "'x'"})
	g.cross("time/accessor-dyn", "timestamp(object.metadata.creationTimestamp).%s()", accessors)
	g.cross("time/compare", "%s %s %s", times[:3], []string{"<", ">=", "!="}, times[:3])
	g.cross("time/tz-string", "timestamp('2024-06-01T12:00:00Z').getHours(%s)", qs("America/New_York", "Europe/London", "Asia/Tokyo", "+00:00", "-00:00", "+14:00", "-12:00", "+9", "utc", "Local", "GMT", "EST", "Etc/GMT+5", "America/Argentina/Buenos_Aires", "+01:30:00"))
}

func (g *generator) macros() {
	colls := []string{"[]", "[1, 2, 3]", "[0, 1]", "['a', 'b', 'a']", "{'a': 1, 'b': 2}", "{}", "[1, 2, 1/0]", "[1, 'a']", "object.spec.template.spec.containers", "object.metadata.labels"}
	preds := []string{"true", "false", "x == 1", "x > 0", "x == 'a'", "1 / x > 0", "x != x"}
	for _, m := range []string{"all", "exists", "exists_one"} {
		g.cross("macro/"+m, "%s."+m+"(x, %s)", colls, preds)
	}
	g.cross("macro/map", "%s.map(x, %s)", colls, []string{"x", "x + x", "[x]", "1 / x", "type(x)"})
	g.cross("macro/map-filter", "%s.map(x, %s, %s)", colls[:6], []string{"x > 1", "x == 'a'", "true", "1 / 0 == 1"}, []string{"x", "x * 2"})
	g.cross("macro/filter", "%s.filter(x, %s)", colls, preds)
	g.cross("macro/has", "has(%s)", []string{"object.metadata", "object.spec.missing", "object.metadata.labels.app", "{'a': 1}.a", "{'a': 1}.b", "object.spec.template.spec.containers[0].image", "dyn({}).x", "object.status", "oldObject.spec", "params.maxReplicas", "request.userInfo.username", "{'a': {'b': null}}.a.b", "object.spec.missing.deeper"})
	g.cross("macro/has-error", "has(%s)", []string{"dyn(1).a", "[1].a", "'s'.a", "object.spec.replicas.x", "null.a"})
	g.cross("macro/nested", "%s", []string{
		"[1, 2].all(x, [3, 4].all(y, x < y))", "[1, 2].exists(x, [1, 2].exists(x, x == 2))", "[[1, 2], [3]].map(l, l.map(x, x * 10))",
		"[1, 2, 3].map(x, x * 2).filter(y, y > 2).exists(z, z == 6)", "{'a': [1], 'b': []}.filter(k, {'a': [1], 'b': []}[k].size() > 0)",
		"object.spec.template.spec.containers.map(c, c.ports.map(p, p.containerPort)).size()", "[1, 2, 3].exists_one(x, x > 1)", "[1, 2, 3].all(x, x > 0) == true",
		"[1, 2, 3].map(x, [1, 2, 3].map(y, x * y))", "[0, 1, 2].exists(x, 1 / x == 1)", "[0, 1, 2].all(x, 1 / x > 0)", "[1, 0].exists(x, 1 / x == 1)",
		"[0, 1].exists_one(x, 1 / x == 1)", "[1, 2].map(__result__, __result__)",
	})
	twoColls := []string{"[]", "['a', 'b']", "[10, 20, 30]", "{'a': 1, 'b': 2}", "{}", "{1: 'x', 2: 'y'}", "object.metadata.labels", "object.spec.template.spec.containers"}
	twoPreds := []string{"true", "i == 0", "v == 2", "i < v", "type(i) == int", "1 / 0 == 1"}
	for _, m := range []string{"all", "exists", "existsOne"} {
		g.cross("macro2/"+m, "%s."+m+"(i, v, %s)", twoColls, twoPreds)
	}
	g.cross("macro2/transformList", "%s.transformList(i, v, %s)", twoColls, []string{"i", "v", "[i, v]", "string(i) + '=' + string(v)"})
	g.cross("macro2/transformList-filter", "%s.transformList(i, v, %s, %s)", twoColls, []string{"true", "i > 0", "v == 'x'"}, []string{"v", "i"})
	g.cross("macro2/transformMap", "%s.transformMap(i, v, %s)", twoColls, []string{"v", "i", "[v]", "string(v) + '!'"})
	g.cross("macro2/transformMap-filter", "%s.transformMap(i, v, %s, %s)", twoColls, []string{"true", "i != 'a'", "false"}, []string{"v", "i"})
	g.cross("macro2/transformMapEntry", "%s.transformMapEntry(i, v, %s)", twoColls, []string{"{string(v): i}", "{'k': v}", "{}", "{v: i, i: v}"})
	g.cross("macro2/transformMapEntry-filter", "%s.transformMapEntry(i, v, %s, %s)", twoColls, []string{"true", "false"}, []string{"{string(i): v}"})
	g.cross("macro2/errors", "%s", []string{"[1, 2].all(i, i, true)", "[1].all(x, y, z, true)", "{'a': 1}.transformMap(k, v, k, v, k)", "[1].transformList(i, 1, i)", "[1, 1].transformMapEntry(i, v, {v: i})", "[1, 2].transformMapEntry(i, v, {'k': v})", "[1].exists(i, v, v)"})
	g.cross("macro/errors", "%s", []string{"[1].all(1, true)", "[1].map(x)", "has(x)", "has(object)", "has(object.a.b())", "[1].exists(x.y, true)", "[1].filter(x, 'a')", "[1].all(x, 1)", "1.all(x, true)", "'abc'.exists(c, true)", "dyn('abc').all(c, true)"})
}

func (g *generator) optionals() {
	g.cross("opt/ctor", "%s", []string{"optional.of(1)", "optional.none()", "optional.of(null)", "optional.of(optional.none())"})
	g.cross("opt/ofNonZeroValue", "optional.ofNonZeroValue(%s)", cat([]string{"0", "1", "0u", "0.0", "-0.0", "''", "'a'", "b''", "false", "true", "null", "[]", "[0]", "{}", "{'a': 0}", "duration('0s')", "timestamp(0)", "optional.none()", "double('NaN')"}))
	opts := []string{"optional.of(1)", "optional.none()", "optional.of('x')", "object.?spec.?replicas", "object.?spec.?missing", "optional.of(dyn(null))"}
	g.cross("opt/value", "%s.value()", opts)
	g.cross("opt/hasValue", "%s.hasValue()", opts)
	g.cross("opt/or", "%s.or(%s)", opts, []string{"optional.of(2)", "optional.none()"})
	g.cross("opt/orValue", "%s.orValue(%s)", opts, []string{"2", "'d'", "null"})
	g.cross("opt/optMap", "%s.optMap(v, %s)", opts, []string{"v", "v + v", "1 / 0", "[v]"})
	g.cross("opt/optFlatMap", "%s.optFlatMap(v, %s)", opts, []string{"optional.of(v)", "optional.none()"})
	g.cross("opt/select", "%s", []string{
		"object.?metadata.?name", "object.?metadata.?labels.?app.orValue('none')", "object.?status.?x", "object.spec.?missing", "{'a': 1}.?a", "{'a': 1}.?b",
		"dyn(1).?a", "[1, 2][?0]", "[1, 2][?5]", "[1, 2][?-1]", "{'a': 1}[?'a']", "{'a': 1}[?'z']", "{1: 'x'}[?1u]", "{1: 'x'}[?1.0]", "object.metadata.labels[?'app']",
		"object.?metadata.labels.app", "object.?spec.replicas.orValue(0)", "optional.of({'a': 1}).?a", "optional.none().?a", "optional.of({'a': {'b': 2}}).?a.?b.value()",
		"object.?spec.template.spec.containers[?0].?name", "object.spec.template.spec.containers[?9].orValue({})", "optional.of([1, 2])[?1]", "'abc'[?0]",
		"dyn(1)[?'a']", "dyn('s').?a", "dyn([1]).?a", "dyn(1)[?1]",
	})
	g.cross("opt/literal", "%s", []string{
		"[?optional.of(1), ?optional.none(), 3]", "[?optional.none()]", "[?object.?spec.?replicas]", "{?'a': optional.of(1), ?'b': optional.none()}", "{?'a': optional.none()}",
		"{?'x': object.?metadata.?name}", "[1, ?optional.of(2)].size()", "{?1: optional.of('a')}", "[?dyn(optional.of(1))]", "[?1]", "{?'a': 1}",
	})
	g.cross("opt/list", "%s", []string{
		"[].first()", "[1, 2].first()", "[1, 2].last()", "[].last()", "['a'].first().value()", "object.spec.template.spec.containers.first().?name",
		"optional.unwrap([optional.of(1), optional.none(), optional.of(3)])", "optional.unwrap([])", "[optional.of(1), optional.none()].unwrapOpt()", "[optional.none()].unwrapOpt()",
	})
	g.cross("opt/misc", "%s", []string{"optional.of(1) == optional.of(1)", "optional.of(1) == optional.none()", "optional.none() == optional.none()", "optional.of(1) != optional.of(2)",
		"type(optional.of(1))", "optional.of(1).value() + 1", "optional.none().value()", "optional.none().orValue(optional.none()).hasValue()", "optional.of(1).or(optional.of(2)).value()",
		"optional.of(1u) == optional.of(1)", "optional.of([1])", "dyn(optional.of(1)).value()", "optional.of(1).hasValue() && optional.none().hasValue()"})
}

func (g *generator) stringsExt() {
	idx := []string{"0", "1", "3", "-1", "100"}
	g.cross("strings/charAt", "%s.charAt(%s)", strs, idx)
	subs := qs("", "a", "l", "é", "世界", "zz", "🙂", ",")
	g.cross("strings/indexOf", "%s.indexOf(%s)", strs, subs)
	g.cross("strings/indexOf", "%s.indexOf(%s, %s)", strs[:6], subs[:5], []string{"0", "1", "2", "-1", "100"})
	g.cross("strings/lastIndexOf", "%s.lastIndexOf(%s)", strs, subs)
	g.cross("strings/lastIndexOf", "%s.lastIndexOf(%s, %s)", strs[:6], subs[:5], []string{"0", "1", "2", "-1", "100"})
	g.cross("strings/lowerAscii", "%s.lowerAscii()", cat(strs, qs("ÀÉÎ", "İ")))
	g.cross("strings/upperAscii", "%s.upperAscii()", cat(strs, qs("àéî", "ß")))
	g.cross("strings/replace", "%s.replace(%s, %s)", strs, qs("a", "", "l", "é"), qs("x", "", "世"))
	g.cross("strings/replace", "%s.replace(%s, %s, %s)", strs[:6], qs("a", "", "l"), qs("X"), []string{"0", "1", "2", "-1", "100"})
	g.cross("strings/split", "%s.split(%s)", strs, qs(",", "", " ", "l", "世", ",,"))
	g.cross("strings/split", "%s.split(%s, %s)", strs, qs(",", ""), []string{"0", "1", "2", "-1", "-2", "100"})
	g.cross("strings/substring", "%s.substring(%s)", strs, []string{"0", "1", "2", "3", "-1", "100"})
	g.cross("strings/substring", "%s.substring(%s, %s)", strs, []string{"0", "1", "2", "-1", "100"}, []string{"0", "1", "3", "100"})
	g.cross("strings/trim", "%s.trim()", cat(strs, qs(" \t\n a b \r\n", "\u00a0x\u2003", "\u200bx", "\u0085y\u3000")))
	joinLists := []string{"[]", "['a']", "['a', 'b', 'c']", "['', '']", "['é', '世界']", "[1, 2]", "dyn(['x', 1])", "object.metadata.labels.map(k, k).sort()"}
	g.cross("strings/join", "%s.join()", joinLists)
	g.cross("strings/join", "%s.join(%s)", joinLists, qs(",", "", " - ", "世"))
	g.cross("strings/quote", "strings.quote(%s)", cat(strs, qs("\"", "\\", "\a\b\f\v", "\x01", "\u2028", "'"), []string{"'\\xff'", "b'\\xff'"}))
	verbs := qs("%s", "%d", "%f", "%.2f", "%.0f", "%e", "%.3e", "%x", "%X", "%o", "%b", "%5d", "%%", "%s %s", "no verbs", "%", "%z", "%10.3f", "%-5s|", "%.f")
	args := []string{"[1]", "[-7]", "[1u]", "[1.5]", "[-0.0]", "[double('NaN')]", "[double('Infinity')]", "['é']", "[b'ab']", "[true]", "[null]", "[[1, 'a']]", "[{'k': 1}]", "[timestamp(0)]", "[duration('1.5s')]", "[]", "[1, 2]", "[255]", "['hello', 'world']", "[1e20]", "[type(1)]", "[optional.of(1)]"}
	g.cross("strings/format", "%s.format(%s)", verbs, args)
}

func (g *generator) listsExt() {
	lists := []string{"[]", "[1, 2, 3]", "[3, 1, 2]", "[1, 1, 2]", "[1.5, 0.5, -1.0]", "['b', 'a', 'c']", "[1u, 3u, 2u]", "[true, false]", "[duration('2s'), duration('1s')]",
		"[timestamp(2), timestamp(1)]", "[[2], [1]]", "[1, 2.0, 3u]", "[9223372036854775807, 1]", "[b'b', b'a']", "[null, null]", "[double('NaN'), 1.0]", "[1.0, 1]", "[{'a': 1}, {'a': 1}]"}
	for _, f := range []string{"isSorted", "sum", "min", "max", "distinct", "reverse", "sort", "flatten"} {
		g.cross("lists/"+f, "%s."+f+"()", lists)
	}
	g.cross("lists/go-sort", "%s", []string{"lists.range(40).sortBy(x, x % 3)", "lists.range(100).sortBy(x, x % 7)", "lists.range(64).map(x, (x * 37) % 64).sortBy(x, x / 8)", "[3.0, double('NaN'), 1.0, 2.0].sort()", "lists.range(60).map(x, x % 5 == 0 ? double('NaN') : double(x % 11)).sort()", "lists.range(30).map(x, 30 - x).sortBy(x, x % 2)"})
	g.cross("lists/indexOf", "%s.indexOf(%s)", lists[:8], []string{"1", "2", "'a'", "1.5", "1u", "true", "9"})
	g.cross("lists/lastIndexOf", "%s.lastIndexOf(%s)", lists[:8], []string{"1", "2", "'a'", "1.5"})
	g.cross("lists/slice", "%s.slice(%s, %s)", lists[:4], []string{"0", "1", "-1", "3", "4"}, []string{"0", "1", "3", "4"})
	g.cross("lists/flatten", "%s.flatten(%s)", []string{"[]", "[1, [2, [3, [4]]]]", "[[1], [[2]], []]", "[[[[]]]]"}, []string{"0", "1", "2", "-1", "10"})
	g.cross("lists/range", "lists.range(%s)", []string{"0", "1", "5", "-1", "-5"})
	g.cross("lists/sortBy", "%s.sortBy(x, %s)", []string{"[]", "[3, 1, 2]", "['bb', 'a', 'ccc']", "[{'n': 2}, {'n': 1}]", "[1, 'a']"}, []string{"x", "-x", "size(x)", "x.n", "1", "string(x)"})
	g.cross("lists/k8s-objects", "%s", []string{"object.spec.template.spec.containers.map(c, c.name).sort()", "object.spec.template.spec.containers.map(c, c.ports.size()).sum()",
		"object.metadata.labels.map(k, k).sort().isSorted()", "object.spec.template.spec.containers.sortBy(c, c.name).map(c, c.name)", "lists.range(3).map(i, i * i).sum()",
		"object.spec.template.spec.containers.map(c, c.name).indexOf('sidecar')", "[object.spec.replicas, 1].max()", "[[1, 2], [3]].flatten().sum()"})
}

func (g *generator) sets() {
	lists := []string{"[]", "[1]", "[1, 2]", "[2, 1, 1]", "[1u, 2.0]", "['a']", "[[1]]", "[{'a': 1}]", "[1, 'a']"}
	for _, f := range []string{"contains", "equivalent", "intersects"} {
		g.cross("sets/"+f, "sets."+f+"(%s, %s)", lists, lists)
	}
}

func (g *generator) regexLib() {
	res := qs("", "a", "l+", "[a-z]+", "(x)(y)?", "[", `\d`, "é|世", "^", "$", "(?i)h", "a*")
	g.cross("regex/find", "%s.find(%s)", strs, res)
	g.cross("regex/findAll", "%s.findAll(%s)", strs, res)
	g.cross("regex/findAll", "%s.findAll(%s, %s)", strs[:5], res[:6], []string{"0", "1", "2", "-1", "100"})
}

func (g *generator) urls() {
	us := qs("https://example.com:8080/a/b%20c?x=1&y=2&x=3#frag", "http://[::1]:80/path", "http://[fe80::1%25en0]:8080/", "/absolute/path?q", "relative/path", "", "https://user:pw@host/",
		"ftp://a b", "https://例え.jp/日本", "https://example.com", "mailto:a@b.c", "http://host:port/", "https://h/?a=1&a=2&b", "http://1.2.3.4", "https://example.com/%zz", "//host/p", "https://EXAMPLE.com/A")
	g.cross("url/url", "url(%s)", us)
	g.cross("url/isURL", "isURL(%s)", us)
	for _, f := range []string{"getScheme", "getHost", "getHostname", "getPort", "getEscapedPath", "getQuery"} {
		g.cross("url/"+f, "url(%s)."+f+"()", us)
	}
	g.cross("url/misc", "%s", []string{"url('https://a/b') == url('https://a/b')", "type(url('https://a'))", "url('https://a').getQuery()['x']", "string(url('https://a/b'))"})
}

func (g *generator) ipCidr() {
	ips := qs("127.0.0.1", "::1", "0.0.0.0", "::", "169.254.1.1", "fe80::1", "ff02::1", "224.0.0.1", "8.8.8.8", "2001:db8::1", "::ffff:1.2.3.4", "01.2.3.4", "fe80::1%eth0", "1.2.3", "2001:DB8::1", "", "10.0.0.256", "2001:0db8:0000::1", "ff05::1", "255.255.255.255")
	g.cross("ip/ip", "ip(%s)", ips)
	g.cross("ip/isIP", "isIP(%s)", ips)
	g.cross("ip/isCanonical", "ip.isCanonical(%s)", ips)
	for _, f := range []string{"family", "isUnspecified", "isLoopback", "isLinkLocalMulticast", "isLinkLocalUnicast", "isGlobalUnicast"} {
		g.cross("ip/"+f, "ip(%s)."+f+"()", ips)
	}
	g.cross("ip/string", "string(ip(%s))", ips)
	g.cross("ip/eq", "ip(%s) == ip(%s)", qs("1.2.3.4", "::1"), qs("1.2.3.4", "::1", "0:0::1"))
	cidrs := qs("10.0.0.0/8", "10.0.0.1/8", "192.168.0.0/16", "0.0.0.0/0", "::/0", "2001:db8::/32", "fe80::/10", "1.2.3.4/32", "1.2.3.4/33", "1.2.3.4", "", "10.0.0.0/08", "::ffff:0:0/96", "2001:db8::1/128")
	g.cross("cidr/cidr", "cidr(%s)", cidrs)
	g.cross("cidr/isCIDR", "isCIDR(%s)", cidrs)
	for _, f := range []string{"ip", "masked", "prefixLength"} {
		g.cross("cidr/"+f, "cidr(%s)."+f+"()", cidrs)
	}
	g.cross("cidr/string", "string(cidr(%s))", cidrs)
	g.cross("cidr/containsIP", "cidr(%s).containsIP(%s)", qs("10.0.0.0/8", "2001:db8::/32", "0.0.0.0/0"), cat(qs("10.1.2.3", "11.0.0.1", "2001:db8::5", "::ffff:10.0.0.1", "bad"), []string{"ip('10.0.0.1')", "ip('2001:db8::1')"}))
	g.cross("cidr/containsCIDR", "cidr(%s).containsCIDR(%s)", qs("10.0.0.0/8", "2001:db8::/32"), cat(qs("10.1.0.0/16", "10.0.0.0/8", "10.0.0.0/7", "2001:db8:1::/48", "bad"), []string{"cidr('10.0.0.0/24')"}))
	g.cross("cidr/eq", "cidr(%s) == cidr(%s)", qs("10.0.0.0/8"), qs("10.0.0.0/8", "10.0.0.0/16"))
}

func (g *generator) quantity() {
	qsv := qs("1", "1.5", "100m", "1Ki", "1Mi", "1Gi", "1G", "1e3", "1E3", "-1", "0", "1.0001", "0.1m", "9223372036854775807", "9223372036854775808", "123456789Pi", "1.5Gi", "", "abc", "1 Gi", "+1", "5Ei", "1n", "1u", "1Ti", ".5")
	g.cross("quantity/quantity", "quantity(%s)", qsv)
	g.cross("quantity/isQuantity", "isQuantity(%s)", qsv)
	for _, f := range []string{"isInteger", "asInteger", "asApproximateFloat", "sign"} {
		g.cross("quantity/"+f, "quantity(%s)."+f+"()", qsv)
	}
	small := qs("1", "1.5", "100m", "1Gi", "-1", "1Ki")
	for _, f := range []string{"add", "sub"} {
		g.cross("quantity/"+f, "quantity(%s)."+f+"(%s)", small, cat([]string{"quantity('1')", "quantity('500m')", "quantity('1Gi')", "1", "-2", "9223372036854775807"}))
	}
	for _, f := range []string{"isLessThan", "isGreaterThan", "compareTo"} {
		g.cross("quantity/"+f, "quantity(%s)."+f+"(quantity(%s))", small, small)
	}
	g.cross("quantity/eq", "quantity(%s) == quantity(%s)", small, qs("1", "1000m", "1024", "1Ki"))
	g.cross("quantity/misc", "%s", []string{"quantity('1').add(1).asInteger()", "quantity('9223372036854775807').add(1).asInteger()", "string(quantity('1Ki'))", "type(quantity('1'))", "quantity('1Mi').sub(quantity('1Ki')).isInteger()"})
}

func (g *generator) semver() {
	vs := qs("1.2.3", "v1.2.3", "1.2", "1", "01.2.3", "1.2.3-alpha.1+build", "1.2.3-beta", "0.0.0", "", "x.y.z", "v01.02", "1.2.3.4", "18446744073709551616.0.0", "1.2.3-0", "  1.2.3")
	g.cross("semver/semver", "semver(%s)", vs)
	g.cross("semver/semver-normalize", "semver(%s, %s)", vs, boolsL)
	g.cross("semver/isSemver", "isSemver(%s)", vs)
	g.cross("semver/isSemver-normalize", "isSemver(%s, %s)", vs, boolsL)
	for _, f := range []string{"major", "minor", "patch"} {
		g.cross("semver/"+f, "semver(%s, true)."+f+"()", vs)
	}
	cmp := qs("1.2.3", "1.2.4", "1.10.0", "1.2.3-alpha", "2.0.0", "1.2.3+b")
	for _, f := range []string{"isLessThan", "isGreaterThan", "compareTo"} {
		g.cross("semver/"+f, "semver(%s)."+f+"(semver(%s))", cmp, cmp)
	}
	g.cross("semver/eq", "semver(%s) == semver(%s)", cmp[:3], cmp)
}

func (g *generator) format() {
	names := []string{"dns1123Label", "dns1123Subdomain", "dns1035Label", "qualifiedName", "dns1123LabelPrefix", "dns1123SubdomainPrefix", "dns1035LabelPrefix", "labelValue", "uri", "uuid", "byte", "date", "datetime"}
	vals := qs("", "abc", "a-b.c", "A", "-a", "a_b", "1abc", "example.com/name", strings.Repeat("a", 64), strings.Repeat("a.", 130)+"a", "http://x/y", "6ba7b810-9dad-11d1-80b4-00c04fd430c8", "aGVsbG8=", "2024-01-02", "2024-01-02T03:04:05Z", "not a date", "é")
	for _, n := range names {
		g.cross("format/"+n, "format."+n+"().validate(%s)", vals)
	}
	g.cross("format/named", "format.named(%s)", qs("dns1123Label", "uri", "nope", "", "DNS1123Label"))
	g.cross("format/named", "format.named(%s).value().validate('a_b')", qs("dns1123Label", "labelValue", "qualifiedName"))
	g.cross("format/misc", "%s", []string{"format.named('nope').hasValue()", "type(format.uuid())", "format.dns1123Label() == format.dns1123Label()"})
}

func (g *generator) misc() {
	g.cross("jsonpatch/escapeKey", "jsonpatch.escapeKey(%s)", cat(qs("", "a/b", "~", "~1", "a~/b", "/", "é/世"), []string{"object.metadata.name"}))
	g.cross("literal/int", "%s", []string{"0x7fffffffffffffff", "0xFF", "-0x8000000000000000", "0x8000000000000000", "9223372036854775808", "-9223372036854775809", "18446744073709551616u", "0xFFFFFFFFFFFFFFFFu", "1e400", "0.0e0", ".5", "1.", "1e-400", "00", "01", "1_000"})
	g.cross("literal/string", "%s", []string{`'\a\b\f\n\r\t\v\\\'\"'`, `"\x41\101\u00e9\U0001F642"`, `r'\n\d'`, `R"raw\"`, `'''multi
line'''`, `"""a"b"""`, `'\400'`, `'\uD800'`, `'\U00110000'`, `b'\u00e9'`, `b'\377'`, `'\z'`, `"é"`, `'a' 'b'`})
	g.cross("literal/aggregate", "%s", []string{"[1, 'a']", "[1, 1u]", "{'a': 1, 'b': 'x'}", "{'a': 1, 1: 2}", "[[1], ['a']]", "[dyn(1), 'a']", "{'a': 1, 'a': 2}", "[1, null]", "[null, 1]", "{'k': null, 'j': 1}", "{1: 1, 1u: 2}", "{1.5: 1}", "{[1]: 1}", "{null: 1}", "[1, 2, 3][1]", "{'a': [1, {'b': 2}]}.a[1].b"})
	g.cross("literal/map-keys", "%s", []string{"{dyn(1): 'a', 1u: 'b'}.size()", "{dyn(1): 'a', 1u: 'b'}[1u]", "{1.0: 'a'}[1]", "{1.0: 'a'}[1.0]", "{1: 'a'}[1.0]", "{2u: 'a'}[2.0]", "{-0.0: 'a', 0.0: 'b'}", "{double('NaN'): 1, double('NaN'): 2}.size()", "[null].map(k, {null: 1}[k])", "[[1]].map(k, {[1]: 1}[k])", "dyn(null) in {null: 1}", "{b'a': 1}", "[dyn(b'a')].map(k, {'a': 1}[k])", "dyn(b'a') in {}", "[duration('1s')].map(k, {duration('1s'): 1}[k])", "[timestamp(0)].map(k, {timestamp(0): 1}[k])", "[dyn(int)].map(k, {dyn(int): 1}[k])", "[dyn(null)].map(k, [1][k])", "{b'a': 1}.size()", "[dyn(b'a')].map(k, k in {1: 2})", "{'a': 1, ?'a': optional.none()}", "dyn({1: 'a'}) == dyn({1.0: 'a'})", "dyn({1u: 'a'}) == dyn({1: 'a'})", "{1.5: 'x'}.exists(k, k == 1.5)"})
	g.cross("literal/validators", "%s", []string{"duration('1x')", "timestamp('bad')", "'a'.matches('[')", "'a'.find('(')", "duration('1s') + duration('bad')", "dyn('a').matches('[')", "['a'].map(x, x.matches('('))"})
	g.cross("ident", "%s", []string{"object", "oldObject", "params", "request", "namespaceObject", "missingVar", "int", "type", "google.protobuf.Timestamp", ".object", "object.metadata.name.size", "in", "as", "null.a", "true.a", "Object", "__result__"})
	g.cross("reserved", "%s", []string{"package", "{'a': 1}.package", "object.namespace", "object.if", "object.function", "object.return"})
}

// edges evaluate against binding sets with edge values.
func (g *generator) edges() {
	e := func(group, expr string) { g.addBind("edge/"+group, expr, "edge") }
	for _, ex := range []string{
		"object.empty", "object.empty.size()", "object.emptyList.size()", "object.nul", "object.nul == null", "has(object.nul)", "object.nul.x", "object.unicode",
		"object.unicode.size()", "object.unicode.charAt(7)", "object.keys['a-b']", "object.keys['ünï']", "object.keys['']", "object.keys.size()", "object.big", "object.big + 1",
		"object.small - 1", "object.float", "object.intFloat", "type(object.intFloat)", "object.intFloat == 2", "object.huge", "object.huge * 10.0", "object.bigu", "type(object.bigu)",
		"object.nested.a.b.c[1].d", "object.nested.a.b.c[2]", "object.nested.a.b.c[1].e", "object.str == ''", "object.bools.all(b, b)", "object.mixed.size()", "object.mixed[1] + 'b'",
		"object.mixed.map(x, type(x))", "object.mixed.exists(x, x == null)", "object.mixed == object.mixed", "object.mixed.filter(x, x == 1)", "object.mixed[2] == null",
		"object.mixed[4] == true", "object.missing", "object['missing']", "object.?missing.orValue(1)", "object.negZero", "object.negZero == 0.0", "string(object.negZero)",
		"object.exp", "type(object.exp)", "object.zeroFloat", "type(object.zeroFloat)", "object.keys.all(k, k.size() >= 0)", "object.keys.map(k, k)", "object.nested == object.nested",
		"object == oldObject", "oldObject", "oldObject.x", "params.x", "has(params.x)", "request", "object.nested.a['b']['c'][0]", "object.unicode.matches('世')",
		"object.unicode.substring(6)", "object.unicode.indexOf('🙂')", "object.keys['a-b'] + object.big", "object.emptyList.all(x, false)", "object.emptyList.exists(x, true)",
		"object.empty.all(k, false)", "object.emptyList.sum()", "object.emptyList.min()", "object.emptyList == []", "object.empty == {}", "dyn(object.mixed[0]) == 1.0",
		"object.big == 9223372036854775807.0", "object.bigu > object.big", "object.mixed.sort()", "object.dupKeys", "object.escaped", "object.escaped.size()", "object.ctrl.size()",
	} {
		e("value", ex)
	}
	n := func(expr string) { g.addBind("edge/none", expr, "none") }
	for _, ex := range []string{"object", "object == null", "has(object.a)", "request.operation", "params == null", "oldObject.spec", "1 + 1", "object.?a.orValue(1)", "[object, params].size()"} {
		n(ex)
	}
	h := func(expr string) { g.addBind("edge/huge", expr, "huge") }
	for _, ex := range []string{
		"object.items.size()", "object.items.all(x, x >= 0)", "object.items.exists(x, x == 9999)", "object.items.map(x, x * 2).size()", "object.items.filter(x, x % 2 == 0).size()",
		"object.items.map(x, object.items.map(y, x + y))", "object.items.all(x, object.items.exists(y, y == x))", "object.items.sum()", "object.items.max()", "object.items.isSorted()",
		"object.items.sort().size()", "object.items.reverse()[0]", "object.items.distinct().size()", "object.items.indexOf(5000)", "object.items.slice(10, 20)", "object.text.size()",
		"object.text.contains('y')", "object.text.matches('^x+$')", "object.text.split('').size()", "object.text.replace('x', 'yy').size()", "object.text + object.text",
		"object.text.upperAscii().size()", "object.text.find('x+')", "object.text.findAll('x').size()", "object.strings.join(',').size()", "object.map.size()",
		"object.map.all(k, object.map[k] >= 0)", "object.map.transformMap(k, v, v + 1).size()", "object.items.transformList(i, v, i + v).size()", "lists.range(100000).size()",
		"lists.range(1000).map(i, lists.range(1000).map(j, i)).size()", "object.items == object.items", "object.items + object.items", "object.strings.sortBy(s, s).size()",
		"sets.contains(object.items, object.items)", "sets.intersects(object.strings, ['s999'])", "string(object.items)", "object.items.map(x, string(x)).join('').size()",
		"object.text.lowerAscii().size()", "object.text.indexOf('y')", "object.text.substring(50000).size()", "object.strings.exists_one(s, s == 's5')", "object.text.charAt(99999)",
	} {
		h(ex)
	}
}

// errors are expressions that do not parse or do not check.
func (g *generator) errors() {
	g.cross("error/parse", "%s", []string{"", " ", "1 +", "(1", "1)", "[1, 2", "{'a' 1}", "a.", "'unterminated", "1 = 1", "a ? b", "1 ++ 2", "f(", "x.all(", "{", "}", "..", "'\\q'",
		"1 2", "a b c", "@", "#", "$x", "object.metadata.", "[,]", "{,}", "1 ? 2 : ", "!", "-", "\"\"\"", "😀", "object.🙂", "a\nb", "1 +\n\n+", "\t(", strings.Repeat("(", 300) + "1" + strings.Repeat(")", 300),
		strings.Repeat("[", 100) + strings.Repeat("]", 100), strings.Repeat("-", 300) + "1", strings.Repeat("1 + ", 200) + "1", "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.t.u.v.w.x.y.z + ", "x.?", "[?]", "{?}", "a[?]"})
	g.cross("error/check", "%s", []string{"undefined", "undefinedFunc(1)", "1.undefinedMember()", "'a'.size(1)", "size()", "size(1, 2)", "int('1', 2)", "1 + 'a'", "'a' - 'b'", "[1] + ['a']",
		"{'a': 1} + {'b': 2}", "true + true", "-'a'", "!1", "1 && true", "'a' ? 1 : 2", "1 == 'a'", "[1] == ['a']", "1 < 'a'", "null < null", "b'a' < 'a'", "[1] < [2]", "{}.a.b.c + 1",
		"object.metadata.name.startsWith(1)", "'a'.matches(1)", "timestamp(1.5)", "duration(1)", "optional.of()", "optional.none(1)", "[1].map(x, x + 'a')", "[1].all(x, x)",
		"dyn(1) + 'a'", "type(1) + 1", "int + 1", "1.0 % 2.0", "1u + 1", "1 + 1u", "1 < 1u", "1 == 1u", "1 == 1.0", "[1].exists(x, 'a')", "sets.contains([1], ['a'])",
		"lists.range('a')", "'%s'.format(1)", "strings.quote(1)", "[1, 2].join()", "quantity(1)", "url(1)", "ip(1)", "semver(1)", "isIP()", "format.named(1)", "1.charAt(0)",
		"{}.transformMap(k, v, 1, 2, 3)", "cidr('1.2.3.0/24').containsIP(1)", "object.spec.replicas.matches('x')", "optional.of(1).or(1)", "optional.of(1).orValue('a') + 1"})
}

// bindings are the variable values cases are evaluated against.
func bindings() map[string]map[string]json.RawMessage {
	raw := func(v any) json.RawMessage {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		return b
	}
	container := func(name, image, mem, cpu string, port int, extra map[string]any) map[string]any {
		c := map[string]any{
			"name": name, "image": image, "imagePullPolicy": "IfNotPresent",
			"ports":                  []any{map[string]any{"containerPort": port, "protocol": "TCP", "name": "http"}},
			"resources":              map[string]any{"limits": map[string]any{"memory": mem, "cpu": cpu}, "requests": map[string]any{"memory": mem, "cpu": "100m"}},
			"env":                    []any{map[string]any{"name": "MODE", "value": "production"}, map[string]any{"name": "LOG_LEVEL", "value": "info"}},
			"volumeMounts":           []any{map[string]any{"name": "config", "mountPath": "/etc/" + name, "readOnly": true}},
			"livenessProbe":          map[string]any{"httpGet": map[string]any{"path": "/healthz", "port": port}, "initialDelaySeconds": 10, "periodSeconds": 5},
			"terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
		}
		for k, v := range extra {
			c[k] = v
		}
		return c
	}
	deployment := func(replicas int) map[string]any {
		return map[string]any{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{
				"name": "web-frontend", "namespace": "production", "uid": "6ba7b810-9dad-11d1-80b4-00c04fd430c8", "resourceVersion": "123456", "generation": 4,
				"creationTimestamp": "2024-05-06T07:08:09Z",
				"labels":            map[string]any{"app": "web", "tier": "frontend", "app.kubernetes.io/name": "web", "app.kubernetes.io/version": "1.25.3", "team": "payments"},
				"annotations":       map[string]any{"owner": "team-a", "deployment.kubernetes.io/revision": "4", "description": "The web frontend: héllo 世界"},
				"managedFields":     []any{map[string]any{"manager": "kubectl", "operation": "Update", "apiVersion": "apps/v1", "time": "2024-05-06T07:08:09Z", "fieldsType": "FieldsV1"}},
			},
			"spec": map[string]any{
				"replicas": replicas, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
				"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
				"strategy": map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxSurge": "25%", "maxUnavailable": "25%"}},
				"template": map[string]any{
					"metadata": map[string]any{"labels": map[string]any{"app": "web", "tier": "frontend"}},
					"spec": map[string]any{
						"serviceAccountName": "web", "restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "terminationGracePeriodSeconds": 30,
						"securityContext": map[string]any{"runAsNonRoot": true, "runAsUser": 1000, "fsGroup": 2000},
						"containers": []any{
							container("app", "registry.example.com/team/web:1.25.3", "256Mi", "500m", 8080, map[string]any{"securityContext": map[string]any{"privileged": false, "readOnlyRootFilesystem": true}}),
							container("sidecar", "registry.example.com/proxy/envoy:v1.30", "128Mi", "250m", 9901, nil),
							container("metrics", "registry.example.com/obs/exporter:0.9", "64Mi", "0.1", 9102, map[string]any{"args": []any{"--port=9102", "--verbose"}}),
						},
						"volumes":      []any{map[string]any{"name": "config", "configMap": map[string]any{"name": "web-config"}}, map[string]any{"name": "cache", "emptyDir": map[string]any{}}},
						"nodeSelector": map[string]any{"kubernetes.io/os": "linux"},
						"tolerations":  []any{map[string]any{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}},
					},
				},
			},
			"status": map[string]any{"replicas": replicas, "readyReplicas": replicas, "observedGeneration": 4,
				"conditions": []any{map[string]any{"type": "Available", "status": "True", "lastTransitionTime": "2024-05-06T07:09:00Z", "reason": "MinimumReplicasAvailable"}}},
		}
	}
	k8s := map[string]json.RawMessage{
		"object":    raw(deployment(3)),
		"oldObject": raw(deployment(2)),
		"params":    raw(map[string]any{"maxReplicas": 5, "allowedRegistries": []any{"registry.example.com/", "docker.io/library/"}, "requiredLabels": []any{"app", "tier"}}),
		"request": raw(map[string]any{
			"kind": map[string]any{"group": "apps", "version": "v1", "kind": "Deployment"}, "resource": map[string]any{"group": "apps", "version": "v1", "resource": "deployments"},
			"name": "web-frontend", "namespace": "production", "operation": "CREATE", "dryRun": false,
			"userInfo": map[string]any{"username": "alice", "uid": "42", "groups": []any{"developers", "system:authenticated"}},
		}),
		"namespaceObject": raw(map[string]any{"metadata": map[string]any{"name": "production", "labels": map[string]any{"env": "prod"}}}),
	}
	edge := map[string]json.RawMessage{
		"object": json.RawMessage(`{"empty": {}, "emptyList": [], "nul": null, "unicode": "héllo 世界 🙂", "keys": {"a-b": 1, "ünï": 2, "": 3, "a.b": 4},
			"big": 9223372036854775807, "small": -9223372036854775808, "float": 1.5, "intFloat": 2.0, "huge": 1e308, "bigu": 18446744073709551615,
			"nested": {"a": {"b": {"c": [1, {"d": null}]}}}, "str": "", "bools": [true, false], "mixed": [1, "a", null, 1.5, true, [], {}],
			"negZero": -0.0, "exp": 1e3, "zeroFloat": 0.0, "dupKeys": {"a": 1, "a": 2}, "escaped": "tab\there \"quoted\" \u00e9 \ud83d\ude00", "ctrl": "\u0000\u001f"}`),
		"oldObject": json.RawMessage(`null`),
		"params":    json.RawMessage(`null`),
		"request":   json.RawMessage(`{}`),
	}
	items := make([]any, 10000)
	for i := range items {
		items[i] = i
	}
	strsL := make([]any, 1000)
	m := map[string]any{}
	for i := range strsL {
		strsL[i] = fmt.Sprintf("s%d", i)
		m[fmt.Sprintf("k%d", i)] = i
	}
	huge := map[string]json.RawMessage{
		"object": raw(map[string]any{"items": items, "strings": strsL, "text": strings.Repeat("x", 100000), "map": m}),
	}
	return map[string]map[string]json.RawMessage{defaultBind: k8s, "edge": edge, "none": {}, "huge": huge}
}

// mutation covers message literals in the environment of mutation expressions: the dynamic
// Object types, JSONPatch, and what the checker and the runtime reject.
func (g *generator) mutation() {
	exprs := []string{
		"Object{}",
		"Object{spec: Object.spec{replicas: 3}}",
		"Object{spec: Object.spec{replicas: 3}}.spec.replicas",
		"Object{spec: Object.spec{replicas: object.spec.replicas + 1}}.spec.replicas",
		"Object{spec: object.spec}.spec.replicas",
		"Object{spec: 1}.spec + 1",
		"Object{}.spec",
		"Object{}.spec == null",
		"Object{}.a.b",
		"has(Object{spec: 1}.spec)",
		"has(Object{spec: 1}.foo)",
		"Object{a: 1}.?a.hasValue()",
		"Object{a: 1}.?a.orValue(5)",
		"Object{foo: 1}",
		"Object.spec.template{}",
		"Object.spec.x.y{}",
		".Object{}",
		"Object{spec: 1, spec: 2}.spec",
		"Object{?spec: optional.none()}",
		"has(Object{?spec: optional.none()}.spec)",
		"Object{?spec: optional.of(1)}.spec",
		"Object{?spec: 1}",
		"Object{} == Object{}",
		"Object{a: 1} == Object{a: 1}",
		"Object{a: 1} == Object{a: 2}",
		"Object{a: 1} == Object{a: 1.0}",
		"Object{a: 1} != Object{a: 1}",
		"Object{} == Object.spec{}",
		"true ? Object{} : Object.spec{}",
		"[Object{}, Object.spec{}]",
		"[1, 2].map(x, Object{a: x})",
		"[1, 2].map(x, Object{a: x})[1].a",
		"type(Object{})",
		"type(Object.spec{}) == type(Object.spec{a: 1})",
		"type(Object{}) == type(Object.spec{})",
		"size(Object{a: 1})",
		"Object{a: 1}['a']",
		"'a' in Object{a: 1}",
		"dyn(Object{a: 1}).a",
		"optional.ofNonZeroValue(Object{}).hasValue()",
		"optional.ofNonZeroValue(Object{a: 1}).hasValue()",
		"JSONPatch{}",
		"JSONPatch{op: 'add', path: '/x', value: 1}",
		"[JSONPatch{op: 'add', path: '/x', value: 1}, JSONPatch{op: 'remove', path: '/y'}]",
		"JSONPatch{op: 'add', path: '/x', value: 1}.op",
		"JSONPatch{op: 'add', path: '/x', value: 1}.value",
		"JSONPatch{op: 'add'}.from",
		"JSONPatch{op: 'add'}.value",
		"JSONPatch{value: null}.value",
		"has(JSONPatch{op: 'add'}.path)",
		"has(JSONPatch{op: 'add'}.op)",
		"has(JSONPatch{value: null}.value)",
		"has(JSONPatch{op: ''}.op)",
		"JSONPatch{op: 'x'}.?op.hasValue()",
		"JSONPatch{}.?op.hasValue()",
		"JSONPatch{value: 1}.?value.orValue(2)",
		"JSONPatch{op: 1}",
		"JSONPatch{op: null}",
		"JSONPatch{op: 'x', path: 1, value: 2}",
		"JSONPatch{foo: 1}",
		"JSONPatch{foo: dyn(1)}",
		"JSONPatch{?foo: optional.none()}",
		"JSONPatch{op: 'add'}.foo",
		"JSONPatch{op: 'a'}.foo == 1",
		"JSONPatch{op: dyn('add')}.op",
		"JSONPatch{op: object.spec.replicas}",
		"JSONPatch{path: object.metadata.name}.path",
		"JSONPatch{value: object.spec}.value.replicas",
		"JSONPatch{?op: optional.of('x')}.op",
		"JSONPatch{?op: 'x'}",
		"JSONPatch{} == JSONPatch{}",
		"JSONPatch{op: 'a'} == JSONPatch{op: 'a'}",
		"JSONPatch{op: 'a', value: 1} == JSONPatch{op: 'a', value: 1.0}",
		"JSONPatch{op: 'a', value: 1} == JSONPatch{op: 'a'}",
		"JSONPatch{} == JSONPatch{path: ''}",
		"Object{a: 1} == JSONPatch{}",
		"type(JSONPatch{})",
		"JSONPatch.foo{}",
		"Foo{}",
		"Foo{a: x}",
		"x.Object{}",
		"int{}",
		"list{}",
		"map{}",
		"type{}",
		"dyn{}",
		"object{}",
		"request{}",
		"int{a: 1}",
		"jsonpatch.escapeKey('a/b~c')",
		"[JSONPatch{op: 'add', path: '/metadata/labels/' + jsonpatch.escapeKey('app/name'), value: 'web'}]",
		"object.spec.replicas > 1 ? [JSONPatch{op: 'replace', path: '/spec/replicas', value: 1}] : []",
		"Object{metadata: Object.metadata{labels: {'a': 'b'}}}.metadata.labels.a",
		"has(dyn(Object{a: 1}).a)", "dyn(Object{a: 1}).?a", "dyn(Object{a: 1})[?'a']", "dyn(Object{a: 1})['a']", "Object{a: 1}.?a",
		"Object{spec: Object.spec{replicas: 3}}.spec", "Object{}.spec.replicas", "Object{spec: Object.spec{x: Object.spec.x{y: 1}}}.spec.x.y",
		"has(Object{spec: Object.spec{replicas: 3}}.spec.replicas)", "dyn(Object{spec: Object.spec{replicas: 3}}.spec).replicas", "[Object{a: 1}][0].a",
		"Object{spec: Object.spec{list: [Object.spec.list{a: 1}]}}.spec.list[0].a",
	}
	for _, e := range exprs {
		id := "mutation/" + e
		if g.seen[id] {
			continue
		}
		g.seen[id] = true
		g.cases = append(g.cases, Case{ID: id, Group: "mutation", Expr: e, Bind: defaultBind, Mutation: true})
	}
}
