//! What differs between ValidatingAdmissionPolicies and MutatingAdmissionPolicies for the
//! operator, in one trait: the policy controller, the compile cache and the status writer are
//! written once, generic over it, and each implementation below is the whole of what is
//! particular to its kind.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use celgate_crds::{
    BindingStatus, MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding,
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use celgate_engine::apivalidation::validate_resource_rules;
use celgate_engine::model::{MutatingBindingSpec, ParamKind, ParamRef, ValidatingBindingSpec};
use celgate_engine::mutate::{ApplySemantics, compile_mutating};
use celgate_engine::{
    BoundMutatingPolicy, BoundPolicy, MutatingPolicy, PolicySet, Unbound, ValidatingPolicy,
    compile_validating,
};
use celgate_kinds::convert;
use celgate_snapshot::PolicyParamKinds;
use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::metrics::{self, resource};

/// A kind of admission policy, implemented by the policy's CRD type.
pub trait PolicyKind:
    Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Serialize + Send + Sync + 'static
{
    /// The binding kind that names policies of this kind.
    type Binding: Resource<DynamicType = ()>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static;
    /// The compiled policy.
    type Compiled: Send + Sync + 'static;
    /// A binding as the engine takes it.
    type BindingSpec: PartialEq + Send + Sync + 'static;
    /// A compiled policy with the bindings that name it, as a policy set holds it.
    type Bound;
    /// What besides uid and generation a compiled form depends on (the apply semantics a
    /// mutating policy's annotation selects; nothing for a validating policy).
    type Variant: Copy + PartialEq + Send + Sync + 'static;

    /// The kind, as messages name it.
    const KIND: &'static str;
    /// The binding kind, as messages name it.
    const BINDING_KIND: &'static str;
    /// The controller's label in the reconcile metrics.
    const CONTROLLER: &'static str;
    /// The watched resources' labels in the watch metrics: policies, then bindings.
    const RESOURCES: (&'static str, &'static str);

    /// The variant this stored policy is compiled with.
    fn variant(&self) -> Self::Variant;
    /// Compiles the stored policy; expressions that do not compile stay in it as errors.
    fn compile(&self) -> Self::Compiled;
    /// The variant a compiled policy was compiled with.
    fn compiled_variant(compiled: &Self::Compiled) -> Self::Variant;
    /// The compiled policy's name, uid and generation.
    fn compiled_identity(compiled: &Self::Compiled) -> (&str, &str, i64);
    /// Each field whose expression does not compile, with its error.
    fn compile_errors(compiled: &Self::Compiled) -> Vec<(String, String)>;
    /// The compiled policy's paramKind.
    fn compiled_param_kind(compiled: &Self::Compiled) -> Option<&ParamKind>;
    /// The stored policy's paramKind.
    fn param_kind(&self) -> Option<&celgate_crds::ParamKind>;
    /// What kube-apiserver refuses in the stored policy's `matchConstraints.resourceRules`, each
    /// error as it prints it (field, value, why). A webhook configuration holding one refused
    /// rule is refused whole, so such a policy is left out of the policy set and of celgate's
    /// configurations (its failurePolicy cannot apply: no request is sent for it).
    fn rule_errors(&self) -> Vec<String> {
        let object = serde_json::to_value(self).unwrap_or_default();
        let constraints = &object["spec"]["matchConstraints"];
        validate_resource_rules(constraints, "spec.matchConstraints")
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// The policy a stored binding names.
    fn policy_name(binding: &Self::Binding) -> Option<&str>;
    /// A stored binding as the engine takes it.
    fn convert_binding(binding: &Self::Binding) -> Self::BindingSpec;
    /// A stored binding's status.
    fn binding_status(binding: &Self::Binding) -> Option<&BindingStatus>;
    /// A converted binding's own name and the policy it names.
    fn binding_names(binding: &Self::BindingSpec) -> (&str, &str);
    /// A converted binding's paramRef.
    fn param_ref(binding: &Self::BindingSpec) -> Option<&ParamRef>;

    /// A compiled policy with the bindings that name it.
    fn bind(policy: Arc<Self::Compiled>, bindings: Arc<[Arc<Self::BindingSpec>]>) -> Self::Bound;
    /// The policies of this kind bound in a set under `name` (one, or none).
    fn bound_named<'s>(set: &'s PolicySet, name: &str) -> &'s [Self::Bound];
    /// The compiled policy of a bound one.
    fn bound_policy(bound: &Self::Bound) -> &Arc<Self::Compiled>;
    /// The bindings of a bound one.
    fn bound_bindings(bound: &Self::Bound) -> &[Arc<Self::BindingSpec>];
    /// The compiled policies of this kind no binding names.
    fn unbound_of(unbound: &mut Unbound) -> &mut Vec<Arc<Self::Compiled>>;
    /// The paramKinds of this kind's policies, by policy name.
    fn param_kinds_of(kinds: &mut PolicyParamKinds) -> &mut HashMap<String, Option<ParamKind>>;
}

impl PolicyKind for ValidatingAdmissionPolicy {
    type Binding = ValidatingAdmissionPolicyBinding;
    type Compiled = ValidatingPolicy;
    type BindingSpec = ValidatingBindingSpec;
    type Bound = BoundPolicy;
    type Variant = ();

    const KIND: &'static str = "ValidatingAdmissionPolicy";
    const BINDING_KIND: &'static str = "ValidatingAdmissionPolicyBinding";
    const CONTROLLER: &'static str = metrics::VALIDATING_POLICIES;
    const RESOURCES: (&'static str, &'static str) =
        (resource::VALIDATING_POLICIES, resource::VALIDATING_BINDINGS);

    fn variant(&self) {}
    fn compile(&self) -> ValidatingPolicy {
        compile_validating(convert::validating_policy(self))
    }
    fn compiled_variant(_: &ValidatingPolicy) {}
    fn compiled_identity(compiled: &ValidatingPolicy) -> (&str, &str, i64) {
        (&compiled.name, &compiled.spec.uid, compiled.spec.generation)
    }
    fn compile_errors(compiled: &ValidatingPolicy) -> Vec<(String, String)> {
        compiled.compile_errors()
    }
    fn compiled_param_kind(compiled: &ValidatingPolicy) -> Option<&ParamKind> {
        compiled.spec.param_kind.as_ref()
    }
    fn param_kind(&self) -> Option<&celgate_crds::ParamKind> {
        self.spec.param_kind.as_ref()
    }

    fn policy_name(binding: &ValidatingAdmissionPolicyBinding) -> Option<&str> {
        binding.spec.policy_name.as_deref()
    }
    fn convert_binding(binding: &ValidatingAdmissionPolicyBinding) -> ValidatingBindingSpec {
        convert::validating_binding(binding)
    }
    fn binding_status(binding: &ValidatingAdmissionPolicyBinding) -> Option<&BindingStatus> {
        binding.status.as_ref()
    }
    fn binding_names(binding: &ValidatingBindingSpec) -> (&str, &str) {
        (&binding.name, &binding.policy_name)
    }
    fn param_ref(binding: &ValidatingBindingSpec) -> Option<&ParamRef> {
        binding.param_ref.as_deref()
    }

    fn bind(
        policy: Arc<ValidatingPolicy>,
        bindings: Arc<[Arc<ValidatingBindingSpec>]>,
    ) -> BoundPolicy {
        BoundPolicy { policy, bindings }
    }
    fn bound_named<'s>(set: &'s PolicySet, name: &str) -> &'s [BoundPolicy] {
        set.validating_named(name)
    }
    fn bound_policy(bound: &BoundPolicy) -> &Arc<ValidatingPolicy> {
        &bound.policy
    }
    fn bound_bindings(bound: &BoundPolicy) -> &[Arc<ValidatingBindingSpec>] {
        &bound.bindings
    }
    fn unbound_of(unbound: &mut Unbound) -> &mut Vec<Arc<ValidatingPolicy>> {
        &mut unbound.validating
    }
    fn param_kinds_of(kinds: &mut PolicyParamKinds) -> &mut HashMap<String, Option<ParamKind>> {
        &mut kinds.validating
    }
}

impl PolicyKind for MutatingAdmissionPolicy {
    type Binding = MutatingAdmissionPolicyBinding;
    type Compiled = MutatingPolicy;
    type BindingSpec = MutatingBindingSpec;
    type Bound = BoundMutatingPolicy;
    type Variant = ApplySemantics;

    const KIND: &'static str = "MutatingAdmissionPolicy";
    const BINDING_KIND: &'static str = "MutatingAdmissionPolicyBinding";
    const CONTROLLER: &'static str = metrics::MUTATING_POLICIES;
    const RESOURCES: (&'static str, &'static str) =
        (resource::MUTATING_POLICIES, resource::MUTATING_BINDINGS);

    fn variant(&self) -> ApplySemantics {
        convert::apply_semantics(self)
    }
    fn compile(&self) -> MutatingPolicy {
        compile_mutating(convert::mutating_policy(self), self.variant())
    }
    fn compiled_variant(compiled: &MutatingPolicy) -> ApplySemantics {
        compiled.apply_semantics
    }
    fn compiled_identity(compiled: &MutatingPolicy) -> (&str, &str, i64) {
        (&compiled.name, &compiled.spec.uid, compiled.spec.generation)
    }
    fn compile_errors(compiled: &MutatingPolicy) -> Vec<(String, String)> {
        compiled.compile_errors()
    }
    fn compiled_param_kind(compiled: &MutatingPolicy) -> Option<&ParamKind> {
        compiled.spec.param_kind.as_ref()
    }
    fn param_kind(&self) -> Option<&celgate_crds::ParamKind> {
        self.spec.param_kind.as_ref()
    }

    fn policy_name(binding: &MutatingAdmissionPolicyBinding) -> Option<&str> {
        binding.spec.policy_name.as_deref()
    }
    fn convert_binding(binding: &MutatingAdmissionPolicyBinding) -> MutatingBindingSpec {
        convert::mutating_binding(binding)
    }
    fn binding_status(binding: &MutatingAdmissionPolicyBinding) -> Option<&BindingStatus> {
        binding.status.as_ref()
    }
    fn binding_names(binding: &MutatingBindingSpec) -> (&str, &str) {
        (&binding.name, &binding.policy_name)
    }
    fn param_ref(binding: &MutatingBindingSpec) -> Option<&ParamRef> {
        binding.param_ref.as_deref()
    }

    fn bind(
        policy: Arc<MutatingPolicy>,
        bindings: Arc<[Arc<MutatingBindingSpec>]>,
    ) -> BoundMutatingPolicy {
        BoundMutatingPolicy { policy, bindings }
    }
    fn bound_named<'s>(set: &'s PolicySet, name: &str) -> &'s [BoundMutatingPolicy] {
        set.mutating_named(name)
    }
    fn bound_policy(bound: &BoundMutatingPolicy) -> &Arc<MutatingPolicy> {
        &bound.policy
    }
    fn bound_bindings(bound: &BoundMutatingPolicy) -> &[Arc<MutatingBindingSpec>] {
        &bound.bindings
    }
    fn unbound_of(unbound: &mut Unbound) -> &mut Vec<Arc<MutatingPolicy>> {
        &mut unbound.mutating
    }
    fn param_kinds_of(kinds: &mut PolicyParamKinds) -> &mut HashMap<String, Option<ParamKind>> {
        &mut kinds.mutating
    }
}
