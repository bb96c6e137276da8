//! Which fault each window of the soak gets. A run of 60 s or more must show that every
//! recovery path ran, so the schedule first takes one of each kind asked for (a SIGKILL of
//! each role, not of a random one: the API, the sweeper, a worker and a relay each die at
//! least once), then fills the other windows at random, and shuffles the whole.

use rand::Rng;
use rand::seq::SliceRandom;

use super::FaultKind;

/// One planned fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Planned {
    /// SIGKILL of the role at this index of the cluster's roles.
    Kill(usize),
    /// Any other kind.
    Other(FaultKind),
}

/// The plan for `windows` windows over `kinds`, with the cluster's `roles` named as they are
/// (`api`, `sweeper`, `worker-1`, `relay-2`...): every kind once at least, and a kill of
/// each role family (the name before its `-n`) when kills are asked for.
pub fn plan(
    windows: usize,
    kinds: &[FaultKind],
    roles: &[String],
    rng: &mut impl Rng,
) -> anyhow::Result<Vec<Planned>> {
    let mut must: Vec<Planned> = Vec::new();
    for kind in kinds {
        match kind {
            FaultKind::Kill => {
                let mut families: Vec<&str> = Vec::new();
                for (i, role) in roles.iter().enumerate() {
                    let family = role.split('-').next().unwrap_or(role);
                    if !families.contains(&family) {
                        families.push(family);
                        // One member of the family, chosen at random.
                        let members: Vec<usize> = (i..roles.len())
                            .filter(|&j| roles[j].split('-').next() == Some(family))
                            .collect();
                        must.push(Planned::Kill(members[rng.random_range(0..members.len())]));
                    }
                }
            }
            other => must.push(Planned::Other(*other)),
        }
    }
    anyhow::ensure!(
        windows >= must.len(),
        "{windows} fault windows (--seconds / --every) cannot hold the {} faults every run \
         includes (each kind once, and a kill of each role); lengthen --seconds or shorten --every",
        must.len()
    );
    while must.len() < windows {
        let kind = kinds[rng.random_range(0..kinds.len())];
        must.push(match kind {
            FaultKind::Kill => Planned::Kill(rng.random_range(0..roles.len())),
            other => Planned::Other(other),
        });
    }
    must.shuffle(rng);
    Ok(must)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn every_kind_and_every_role_family_is_in_every_plan() {
        let roles: Vec<String> = [
            "api", "sweeper", "worker-1", "worker-2", "worker-3", "relay-1", "relay-2",
        ]
        .map(str::to_owned)
        .to_vec();
        let kinds = [
            FaultKind::Kill,
            FaultKind::S3Down,
            FaultKind::S3Lose,
            FaultKind::PgRestart,
        ];
        for seed in 0..200 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let plan = plan(15, &kinds, &roles, &mut rng).unwrap();
            assert_eq!(plan.len(), 15);
            for family in ["api", "sweeper", "worker", "relay"] {
                assert!(
                    plan.iter()
                        .any(|p| matches!(p, Planned::Kill(i) if roles[*i].starts_with(family))),
                    "seed {seed}: no kill of {family}: {plan:?}"
                );
            }
            for kind in &kinds[1..] {
                assert!(
                    plan.contains(&Planned::Other(*kind)),
                    "seed {seed}: no {kind:?}"
                );
            }
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        assert!(
            plan(6, &kinds, &roles, &mut rng).is_err(),
            "7 faults do not fit 6 windows"
        );
    }
}
