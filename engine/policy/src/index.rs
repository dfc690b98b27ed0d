//! Which bound policies a request's resource can match, found without scanning every policy:
//! each policy is filed under the resources its match constraints' rules name, or under
//! "any" when a rule names every resource (`*`, `*/sub`) or the policy has no rules.

use std::collections::HashMap;

use crate::model::MatchResources;
use crate::request::Request;

/// Positions of policies in one list, filed by the resource names their rules list.
#[derive(Debug, Default, Clone)]
pub struct ResourceIndex {
    /// Policies whose rules name this resource (ascending positions).
    by_resource: HashMap<Box<str>, Vec<u32>>,
    /// Policies that may match any resource (ascending positions).
    any: Vec<u32>,
}

impl ResourceIndex {
    /// Files each policy by the match constraints it has (`None`: none, it may match anything).
    pub fn new<'a>(constraints: impl IntoIterator<Item = Option<&'a MatchResources>>) -> Self {
        let mut index = Self::default();
        for (position, criteria) in constraints.into_iter().enumerate() {
            let Ok(position) = u32::try_from(position) else {
                // Four billion policies do not fit in memory; never reached.
                break;
            };
            let names = criteria
                .filter(|c| !c.resource_rules.is_empty())
                .map(|c| c.resource_rules.iter().flat_map(|r| r.resources.iter()));
            let Some(mut names) = names else {
                index.any.push(position);
                continue;
            };
            let mut filed: Vec<&str> = Vec::new();
            let wildcard = names.any(|entry| {
                let resource = entry.split_once('/').map_or(entry.as_str(), |(r, _)| r);
                if resource == "*" {
                    return true;
                }
                if !filed.contains(&resource) {
                    filed.push(resource);
                }
                false
            });
            if wildcard {
                index.any.push(position);
            } else {
                for resource in filed {
                    index
                        .by_resource
                        .entry(resource.into())
                        .or_default()
                        .push(position);
                }
            }
        }
        index
    }

    /// The positions, ascending and each once, of the policies whose rules can cover `req`: those
    /// naming its resource or the resource the client asked for (they differ after a version
    /// conversion), and those for any resource. Every other policy is a miss.
    pub fn candidates(&self, req: &Request<'_>) -> Candidates<'_> {
        let named = |name: &str| self.by_resource.get(name).map_or(&[][..], Vec::as_slice);
        let asked = if req.request_resource.name == req.resource.name {
            &[][..]
        } else {
            named(req.request_resource.name)
        };
        Candidates {
            lists: [&self.any, named(req.resource.name), asked],
        }
    }
}

/// The merge of up to three ascending lists of positions, without repeats.
#[derive(Debug, Clone)]
pub struct Candidates<'i> {
    lists: [&'i [u32]; 3],
}

impl Iterator for Candidates<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        let next = self.lists.iter().filter_map(|l| l.first()).min().copied()?;
        for list in &mut self.lists {
            if list.first() == Some(&next) {
                *list = &list[1..];
            }
        }
        usize::try_from(next).ok()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::ResourceRule;

    fn rules(resources: &[&[&str]]) -> Option<MatchResources> {
        Some(MatchResources {
            resource_rules: resources
                .iter()
                .map(|names| ResourceRule {
                    resources: names.iter().map(|s| (*s).to_string()).collect(),
                    ..ResourceRule::default()
                })
                .collect(),
            ..MatchResources::default()
        })
    }

    fn request<'a>(review: &'a serde_json::Value) -> Request<'a> {
        Request::from_json(review).unwrap()
    }

    fn review(resource: &str, asked: &str) -> serde_json::Value {
        json!({"uid": "u", "operation": "CREATE", "namespace": "default", "name": "x",
            "kind": {"group": "", "version": "v1", "kind": "K"},
            "resource": {"group": "apps", "version": "v1", "resource": resource},
            "requestResource": {"group": "apps", "version": "v1beta1", "resource": asked},
            "object": {}, "userInfo": {"username": "u"}})
    }

    #[test]
    fn a_request_meets_the_policies_naming_its_resource_and_those_for_any_in_order() {
        let policies = [
            rules(&[&["deployments"]]),                                        // 0
            rules(&[&["pods", "pods/status"]]),                                // 1
            None,                                                              // 2: no constraints
            rules(&[&["*/scale"]]), // 3: any resource's scale
            rules(&[]),             // 4: no rules
            rules(&[&["configmaps"], &["deployments/status", "deployments"]]), // 5
            rules(&[&["replicasets"]]), // 6
        ];
        let index = ResourceIndex::new(policies.iter().map(Option::as_ref));
        let same = review("deployments", "deployments");
        assert_eq!(
            index.candidates(&request(&same)).collect::<Vec<_>>(),
            [0, 2, 3, 4, 5]
        );
        // Converted from the resource the client asked for: both names are candidates.
        let converted = review("deployments", "replicasets");
        assert_eq!(
            index.candidates(&request(&converted)).collect::<Vec<_>>(),
            [0, 2, 3, 4, 5, 6]
        );
        let other = review("secrets", "secrets");
        assert_eq!(
            index.candidates(&request(&other)).collect::<Vec<_>>(),
            [2, 3, 4]
        );
    }
}
