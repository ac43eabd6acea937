//! Greedy parity of two servers' middles, token by token, "up to the first near-tie": both middles are walked
//! together over the tokens both generated (each server's `completion_probabilities`); where they first differ,
//! the step is a near-tie when either server itself scored the other's token within [`NEAR_TIE`] nats of its own
//! pick (two implementations of the same quantized model may order two almost equally likely tokens either way),
//! and a real divergence otherwise. Where one middle ends first (its server's stop rules) they agree.

use serde::Serialize;

use super::client::ProbToken;

/// Two tokens whose log-probabilities differ by less than this (nats) are a near-tie.
pub const NEAR_TIE: f64 = 0.25;

/// How two greedy middles compare.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Parity {
    /// Every token both generated is the same (`common` of them).
    Same { common: usize },
    /// They first differ at token `at`, a near-tie: `gap_a` is how much less likely server A found B's token than
    /// its own (`None`: not among its alternatives), `gap_b` the same for B.
    NearTie {
        at: usize,
        gap_a: Option<f64>,
        gap_b: Option<f64>,
    },
    /// They first differ at token `at`, and neither server found the other's token nearly as likely.
    Diverged {
        at: usize,
        gap_a: Option<f64>,
        gap_b: Option<f64>,
    },
    /// A server sent no token probabilities.
    Unknown,
}

/// How much less likely `step` found `other` than its own pick (`None` when `other` is not listed).
fn gap(step: &ProbToken, other: &[u8]) -> Option<f64> {
    step.top
        .iter()
        .find(|(bytes, _)| bytes == other)
        .map(|(_, lp)| (step.logprob - lp).max(0.0))
}

/// Compares server A's tokens with server B's.
pub fn compare(a: &[ProbToken], b: &[ProbToken]) -> Parity {
    if a.is_empty() || b.is_empty() {
        return Parity::Unknown;
    }
    let common = a.len().min(b.len());
    let Some(at) = (0..common).find(|&i| a[i].bytes != b[i].bytes) else {
        return Parity::Same { common };
    };
    let gap_a = gap(&a[at], &b[at].bytes);
    let gap_b = gap(&b[at], &a[at].bytes);
    let near = |g: Option<f64>| g.is_some_and(|g| g < NEAR_TIE);
    match near(gap_a) || near(gap_b) {
        true => Parity::NearTie { at, gap_a, gap_b },
        false => Parity::Diverged { at, gap_a, gap_b },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok(text: &str, logprob: f64, top: &[(&str, f64)]) -> ProbToken {
        ProbToken {
            bytes: text.as_bytes().to_vec(),
            logprob,
            top: top
                .iter()
                .map(|(t, l)| (t.as_bytes().to_vec(), *l))
                .collect(),
        }
    }

    #[test]
    fn the_first_difference_decides_and_its_margin_names_it() {
        let a = [
            tok("return", -0.1, &[("return", -0.1), ("print", -3.0)]),
            tok(" a", -0.6, &[(" a", -0.6), (" b", -0.7)]),
        ];
        let b_same = [a[0].clone()];
        assert_eq!(compare(&a, &b_same), Parity::Same { common: 1 });
        let b_tie = [
            a[0].clone(),
            tok(" b", -0.65, &[(" b", -0.65), (" a", -0.66)]),
        ];
        match compare(&a, &b_tie) {
            Parity::NearTie {
                at: 1,
                gap_a,
                gap_b,
            } => {
                assert!((gap_a.unwrap() - 0.1).abs() < 1e-9);
                assert!((gap_b.unwrap() - 0.01).abs() < 1e-9);
            }
            other => panic!("{other:?}"),
        }
        let b_far = [tok("print", -0.2, &[("print", -0.2), ("x", -4.0)])];
        match compare(&a, &b_far) {
            Parity::Diverged {
                at: 0,
                gap_a: Some(g),
                gap_b: None,
            } => assert!((g - 2.9).abs() < 1e-9),
            other => panic!("{other:?}"),
        }
        assert_eq!(compare(&a, &[]), Parity::Unknown);
    }
}
