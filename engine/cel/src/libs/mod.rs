//! Function libraries: each registers its functions in a [`Registry`], and [`build`] makes
//! the registry of a set of libraries. The helpers below read the arguments an overload's
//! signature guarantees.

pub mod authz;
pub(crate) mod format;
pub(crate) mod go_sort;
pub(crate) mod ip;
pub(crate) mod jsonpatch;
pub(crate) mod kube_lists;
pub(crate) mod lists;
pub(crate) mod mutation;
pub(crate) mod opaque;
pub(crate) mod optional;
pub(crate) mod quantity;
pub(crate) mod re2_syntax;
pub(crate) mod regex;
pub(crate) mod semver;
pub(crate) mod sets;
pub(crate) mod std_lib;
pub(crate) mod string_format;
pub(crate) mod strings;
#[cfg(test)]
pub(crate) mod testing;
pub(crate) mod time;
pub(crate) mod urls;
pub(crate) mod validators;

use crate::error::EvalError;
use crate::registry::Registry;
use crate::value::Value;

/// The libraries an environment can enable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Library {
    /// The CEL standard library.
    Standard,
    /// cel-go `ext.Strings` (version 2 functions, plus `format` and `quote`).
    Strings,
    /// cel-go's optional types.
    Optional,
    /// Kubernetes' lists library (`isSorted`, `sum`, `min`, `max`, `indexOf`, `lastIndexOf`).
    KubeLists,
    /// cel-go `ext.Lists` version 3.
    Lists,
    /// cel-go `ext.Sets`.
    Sets,
    /// Kubernetes' regex library (`find`, `findAll`).
    Regex,
    /// Kubernetes' quantity library.
    Quantity,
    /// Kubernetes' IP and CIDR libraries.
    Ip,
    /// Kubernetes' URL library.
    Urls,
    /// Kubernetes' semver library.
    Semver,
    /// Kubernetes' named formats library.
    Format,
    /// Kubernetes' authorization library, with field and label selectors (kube-apiserver 1.36
    /// accepts them at every compatibility version).
    Authz,
    /// cel-go `ext.TwoVarComprehensions`: macros only.
    TwoVarComprehensions,
    /// `<string>.format(list)` of cel-go's strings extension, version 2.
    StringFormat,
}

impl Library {
    /// The Kubernetes minor version whose NewExpressions environment first has the library
    /// (`IntroducedVersion` in kube-apiserver's base environment; 0 for the always-on ones).
    pub(crate) fn introduced(self) -> u32 {
        match self {
            Library::Standard | Library::KubeLists | Library::Regex | Library::Urls => 0,
            Library::Authz => 27,
            Library::Optional | Library::Quantity => 28,
            Library::Strings | Library::StringFormat | Library::Sets => 29,
            Library::Ip => 30,
            Library::Format => 31,
            Library::TwoVarComprehensions => 32,
            Library::Semver => 33,
            Library::Lists => 34,
        }
    }
}

/// Builds the registry for `libs`.
pub(crate) fn build(libs: &[Library]) -> Registry {
    let mut r = Registry::default();
    for lib in libs {
        match lib {
            Library::Standard => std_lib::register(&mut r),
            Library::Strings => strings::register(&mut r),
            Library::Optional => optional::register(&mut r),
            Library::KubeLists => kube_lists::register(&mut r),
            Library::Lists => {
                lists::register(&mut r);
                r.enable_macros(|m| m.sort_by = true);
            }
            Library::Sets => sets::register(&mut r),
            Library::Regex => regex::register(&mut r),
            Library::Quantity => quantity::register(&mut r),
            Library::Ip => ip::register(&mut r),
            Library::Urls => urls::register(&mut r),
            Library::Semver => semver::register(&mut r),
            Library::Format => format::register(&mut r),
            Library::Authz => authz::register(&mut r),
            Library::TwoVarComprehensions => r.enable_macros(|m| m.two_var = true),
            Library::StringFormat => string_format::register(&mut r),
        }
    }
    r
}

/// An argument that an overload's signature guarantees; `NoSuchOverload` otherwise.
pub(crate) fn arg<'v, 'a>(args: &'v [Value<'a>], i: usize) -> Result<&'v Value<'a>, EvalError> {
    args.get(i).ok_or(EvalError::no_such_overload())
}

/// The string argument at `i`.
pub(crate) fn str_arg<'v>(args: &'v [Value<'_>], i: usize) -> Result<&'v str, EvalError> {
    match args.get(i) {
        Some(Value::String(s)) => Ok(s),
        _ => Err(EvalError::no_such_overload()),
    }
}

/// The int argument at `i`.
pub(crate) fn int_arg(args: &[Value<'_>], i: usize) -> Result<i64, EvalError> {
    match args.get(i) {
        Some(Value::Int(n)) => Ok(*n),
        _ => Err(EvalError::no_such_overload()),
    }
}
