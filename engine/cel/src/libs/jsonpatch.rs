//! Kubernetes' JSON Patch library, for mutation expressions only: `jsonpatch.escapeKey`, which
//! escapes a key for a JSON Pointer (`~` → `~0`, `/` → `~1`).

use super::str_arg;
use crate::cost::{actual_size, traversal_cost};
use crate::error::EvalError;
use crate::registry::Registry;
use crate::types::Type;
use crate::value::Value;

pub(crate) fn register(r: &mut Registry) {
    r.def("jsonpatch.escapeKey")
        .global(&[Type::String], Type::String)
        .imp(escape_key)
        .cost(|args, _| traversal_cost(args.first().map(actual_size).unwrap_or(0)))
        .done();
}

fn escape_key<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::string(
        str_arg(args, 0)?.replace('~', "~0").replace('/', "~1"),
    ))
}

#[cfg(test)]
mod tests {
    use crate::{Activation, Budget, Env, Value};

    #[test]
    fn escape_key_only_in_mutation_environments() {
        let env = Env::kubernetes().mutation_library().build();
        let cases = [
            ("jsonpatch.escapeKey('a/b~c')", "a~1b~0c"),
            ("jsonpatch.escapeKey('~1')", "~01"),
            ("jsonpatch.escapeKey('plain')", "plain"),
        ];
        for (src, want) in cases {
            let out = env.compile(src).map_err(|e| e.to_string()).and_then(|p| {
                p.eval(&Activation::new(), &mut Budget::default())
                    .map(Value::into_static)
                    .map_err(|e| e.to_string())
            });
            assert_eq!(out, Ok(Some(Value::string(want))), "{src}");
        }
        assert!(
            Env::kubernetes()
                .build()
                .compile("jsonpatch.escapeKey('a')")
                .is_err()
        );
    }
}
