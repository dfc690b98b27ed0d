//! Which CEL library set each expression of a write compiles with: one the old object already
//! has is a stored expression, a new or changed one compiles at the compatibility version.

use std::collections::HashSet;

use serde_json::Value;

use celgate_cel::{Compatibility, Expressions};

use super::json::{list_of, str_of};

/// Which environment each expression of a write compiles in (kube-apiserver's
/// `preexistingExpressions`): an expression the old object already has compiles with the
/// StoredExpressions environment, a new or changed one with NewExpressions at the compatibility
/// version, so stored policies keep working across a rollback.
#[derive(Debug, Default)]
pub struct Environments<'a> {
    compatibility: Compatibility,
    match_conditions: HashSet<&'a str>,
    validations: HashSet<&'a str>,
    messages: HashSet<&'a str>,
    audit_values: HashSet<&'a str>,
    apply_configurations: HashSet<&'a str>,
}

impl<'a> Environments<'a> {
    /// For a write of `old` (`None` or JSON null on create) at `compatibility`.
    pub fn new(compatibility: Compatibility, old: Option<&'a Value>) -> Self {
        let mut envs = Environments {
            compatibility,
            ..Default::default()
        };
        let Some(spec) = old.and_then(|o| o.get("spec")) else {
            return envs;
        };
        let collect = |items: &'a [Value], field: &str, into: &mut HashSet<&'a str>| {
            into.extend(items.iter().filter_map(|i| str_of(i, field)));
        };
        collect(
            list_of(spec, "matchConditions"),
            "expression",
            &mut envs.match_conditions,
        );
        collect(
            list_of(spec, "validations"),
            "expression",
            &mut envs.validations,
        );
        collect(
            list_of(spec, "validations"),
            "messageExpression",
            &mut envs.messages,
        );
        collect(
            list_of(spec, "auditAnnotations"),
            "valueExpression",
            &mut envs.audit_values,
        );
        // Upstream also collects the old jsonPatch expressions, but never looks them up.
        let apply = list_of(spec, "mutations")
            .iter()
            .filter_map(|m| m.get("applyConfiguration"));
        envs.apply_configurations
            .extend(apply.filter_map(|a| str_of(a, "expression")));
        envs
    }

    /// The libraries of a `matchConditions[].expression`.
    pub(super) fn match_condition(&self, expression: &str) -> Expressions {
        self.pick(&self.match_conditions, expression)
    }

    /// The libraries of a `validations[].expression`, and of a variable's expression: as
    /// upstream, a variable counts as preexisting when a validation of the old object has the
    /// same expression.
    pub(super) fn validation(&self, expression: &str) -> Expressions {
        self.pick(&self.validations, expression)
    }

    /// The libraries of a `validations[].messageExpression`.
    pub(super) fn message(&self, expression: &str) -> Expressions {
        self.pick(&self.messages, expression)
    }

    /// The libraries of an `auditAnnotations[].valueExpression`.
    pub(super) fn audit_value(&self, expression: &str) -> Expressions {
        self.pick(&self.audit_values, expression)
    }

    /// The libraries of a mutation's expression, of either patch type: upstream looks both up
    /// among the old applyConfiguration expressions, and so does celgate.
    pub(super) fn mutation(&self, expression: &str) -> Expressions {
        self.pick(&self.apply_configurations, expression)
    }

    fn pick(&self, preexisting: &HashSet<&str>, expression: &str) -> Expressions {
        if preexisting.contains(expression) {
            Expressions::Stored
        } else {
            Expressions::New(self.compatibility)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apivalidation::test_objects::{base, policy, texts};
    use crate::apivalidation::validate_policy;
    use serde_json::json;

    #[test]
    fn new_expressions_get_the_libraries_of_the_compatibility_version_and_stored_ones_all() {
        // ext.Lists (`sort`) arrived in 1.34.
        let at_1_33 = Compatibility::new(33).expect("in range");
        let mut spec = base();
        spec["validations"] = json!([{"expression": "object.spec.template.spec.containers.map(c, c.name).sort().size() < 5",
            "messageExpression": "'names: ' + object.spec.template.spec.containers.map(c, c.name).sort().join(', ')"}]);
        spec["matchConditions"] = json!([{"name": "sorted",
            "expression": "[2, 1].sort() == [1, 2]"}]);
        let new = policy(spec);
        let created = texts(&validate_policy(&new, &Environments::new(at_1_33, None)));
        assert_eq!(created.len(), 3, "{created:#?}");
        for (err, field) in created.iter().zip([
            "spec.matchConditions[0].expression",
            "spec.validations[0].expression",
            "spec.validations[0].messageExpression",
        ]) {
            assert!(err.starts_with(field), "{err}");
            assert!(err.contains("undeclared reference to 'sort'"), "{err}");
        }
        // The same expressions already stored: an update that keeps them is valid.
        let updated = validate_policy(&new, &Environments::new(at_1_33, Some(&new)));
        assert!(updated.is_empty(), "{:?}", texts(&updated));
        // At the default compatibility version (1.35), new expressions may use the library.
        assert!(validate_policy(&new, &Environments::default()).is_empty());
        // A changed expression is new again.
        let mut changed = new.clone();
        changed["spec"]["validations"][0]["expression"] =
            json!("object.spec.template.spec.containers.map(c, c.name).sort().size() < 6");
        let errs = texts(&validate_policy(
            &changed,
            &Environments::new(at_1_33, Some(&new)),
        ));
        assert_eq!(errs.len(), 1, "{errs:#?}");
        assert!(
            errs[0].starts_with("spec.validations[0].expression"),
            "{errs:#?}"
        );
    }
}
