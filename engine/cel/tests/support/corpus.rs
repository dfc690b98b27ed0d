//! The differential corpus written by `engine/cel/differential` (`differential gen`), shared by
//! the differential test and the cel-go comparison benchmark.

// Included by two targets (`#[path]`), each reading a subset of the fields.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

use celgate_cel::{Activation, Env, Type};
use serde::Deserialize;
use serde_json::Value as Json;

/// The corpus: variables (all `dyn`), named binding sets and cases.
#[derive(Deserialize)]
pub struct Corpus {
    /// Variables declared `dyn` in the environment.
    pub variables: Vec<String>,
    /// Binding set name → variable → JSON value.
    pub bindings: BTreeMap<String, BTreeMap<String, Json>>,
    /// The cases, in generation order.
    pub cases: Vec<Case>,
}

/// One expression evaluated against one binding set.
#[derive(Deserialize)]
pub struct Case {
    /// Stable id: `group/expression[ @binding]`.
    pub id: String,
    /// The group (library/function or feature).
    pub group: String,
    /// The CEL expression.
    pub expr: String,
    /// The binding set; empty means none.
    #[serde(default)]
    pub bind: String,
    /// Whether the case is a benchmark case.
    #[serde(default)]
    pub bench: bool,
    /// Whether the case iterates a map: cel-go's map order is random, so list order and cost
    /// (short-circuits) are not comparable.
    #[serde(default)]
    pub unordered: bool,
    /// Whether the case compiles in the environment of mutation expressions.
    #[serde(default)]
    pub mutation: bool,
}

impl Corpus {
    /// Reads the corpus at `path`.
    pub fn read(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The oracle's environment: Kubernetes' environment with the mutation library
    /// (`jsonpatch`, as mutating policies have it) and the corpus' variables declared `dyn`.
    pub fn env(&self) -> Env {
        self.variables
            .iter()
            .fold(Env::kubernetes().mutation_library(), |b, v| {
                b.variable(v, Type::Dyn)
            })
            .build()
    }

    /// [`Corpus::env`] with what mutation expressions add (the message types `Object`,
    /// `Object.<path>` and `JSONPatch`, and `jsonpatch.escapeKey`).
    pub fn mutation_env(&self) -> Env {
        self.env().extend().mutation_library().build()
    }

    /// An activation binding `case`'s binding set.
    pub fn activation(&self, case: &Case) -> Activation<'_> {
        let mut act = Activation::new();
        if let Some(vars) = self.bindings.get(&case.bind) {
            for (name, value) in vars {
                act.bind_json(name, value);
            }
        }
        act
    }
}

/// Reads a JSON file.
pub fn read_json(path: &Path) -> Result<Json, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}
