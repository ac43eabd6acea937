use super::*;

#[test]
fn best_k_keeps_what_a_full_sort_keeps_with_ties() {
    let mut rng = StdRng::seed_from_u64(3);
    // Few distinct logits: many ties, broken by token id. Scores as the sampler's (monotone, some dropped),
    // and coarse ones that collapse neighbouring logits onto one value (as rounding may near a temperature's
    // division): ties of equal score across different logits still go by id.
    let fine = |l: f32| (l > -5.0).then_some(l * 2.0);
    let coarse = |l: f32| (l > -5.0).then_some((l * 2.0).floor());
    for k in [1usize, 2, 5, 40, 199, 300] {
        let logits: Vec<f32> = (0..300)
            .map(|_| (rng.gen_range(0..60) as f32) * -0.1)
            .collect();
        for score in [&fine as &dyn Fn(f32) -> Option<f32>, &coarse] {
            let cand: Vec<(u32, f32)> = logits
                .iter()
                .enumerate()
                .filter_map(|(i, &l)| score(l).map(|s| (i as u32, s)))
                .collect();
            let mut got = best_k(&logits, score, k);
            got.sort_unstable_by(|a, b| by_rank(*a, *b));
            let mut want = cand.clone();
            want.sort_unstable_by(|a, b| by_rank(*a, *b));
            want.truncate(k);
            assert_eq!(got, want, "k = {k}");
        }
    }
}

#[test]
fn argmax_is_the_first_largest_finite_or_infinite_logit_at_any_length() {
    let reference = |logits: &[f32]| {
        let mut best: Option<(usize, f32)> = None;
        for (i, &l) in logits.iter().enumerate() {
            if !l.is_nan() && l != f32::NEG_INFINITY && best.is_none_or(|(_, b)| l > b) {
                best = Some((i, l));
            }
        }
        best.map(|(i, _)| i as u32)
    };
    let mut rng = StdRng::seed_from_u64(5);
    let specials = [
        f32::NAN,
        f32::NEG_INFINITY,
        f32::INFINITY,
        0.0,
        -0.0,
        7.0,
        -7.0,
    ];
    for len in [0usize, 1, 2, 15, 16, 17, 31, 33, 100, 1000] {
        for _ in 0..200 {
            let logits: Vec<f32> = (0..len)
                .map(|_| match rng.gen_range(0..4) {
                    0 => specials[rng.gen_range(0..specials.len())],
                    _ => rng.gen_range(-8..8) as f32,
                })
                .collect();
            assert_eq!(argmax(&logits), reference(&logits), "{logits:?}");
        }
    }
    // Equal maxima: the first, with -0 equal to 0, across a 16-lane boundary.
    let mut l = vec![f32::NEG_INFINITY; 40];
    l[20] = -0.0;
    l[3] = 0.0;
    assert_eq!(argmax(&l), Some(3));
    l[3] = f32::NAN;
    assert_eq!(argmax(&l), Some(20));
    l[39] = f32::INFINITY;
    assert_eq!(argmax(&l), Some(39));
    assert_eq!(argmax(&[f32::NAN, f32::NEG_INFINITY]), None);
}

#[test]
fn greedy_takes_argmax_and_skips_masked() {
    let mut s = Sampler::new(SamplingParams::greedy()).unwrap();
    assert_eq!(s.pick(&[0.1, 3.0, 2.0]), Some(1));
    assert_eq!(s.pick(&[0.1, f32::NEG_INFINITY, 2.0]), Some(2));
    assert_eq!(s.pick(&[f32::NEG_INFINITY; 3]), None);
}

#[test]
fn seeded_sampling_is_reproducible() {
    let params = SamplingParams {
        temperature: 1.0,
        seed: Some(7),
        ..SamplingParams::default()
    };
    let logits: Vec<f32> = (0..100).map(|i| (i % 7) as f32 * 0.3).collect();
    let draw = |p: &SamplingParams| {
        let mut s = Sampler::new(p.clone()).unwrap();
        (0..20)
            .map(|_| s.pick(&logits).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(draw(&params), draw(&params));
    let other = SamplingParams {
        seed: Some(8),
        ..params.clone()
    };
    assert_ne!(draw(&params), draw(&other));
}

#[test]
fn top_k_one_and_tiny_top_p_are_greedy() {
    let logits = [1.0, 5.0, 4.9, 0.0];
    for params in [
        SamplingParams {
            temperature: 1.0,
            top_k: 1,
            seed: Some(1),
            ..SamplingParams::default()
        },
        SamplingParams {
            temperature: 1.0,
            top_p: 0.01,
            seed: Some(1),
            ..SamplingParams::default()
        },
        SamplingParams {
            temperature: 1.0,
            min_p: 0.99,
            seed: Some(1),
            ..SamplingParams::default()
        },
    ] {
        let mut s = Sampler::new(params).unwrap();
        for _ in 0..50 {
            assert_eq!(s.pick(&logits), Some(1));
        }
    }
}

#[test]
fn penalties_lower_seen_tokens() {
    let s = Sampler::new(SamplingParams {
        repetition_penalty: 2.0,
        presence_penalty: 1.0,
        frequency_penalty: 0.5,
        ..SamplingParams::greedy()
    })
    .unwrap();
    let mut logits = vec![4.0, -1.0, 4.0];
    s.adjust(&mut logits, &[0, 1, 0], &[0, 0]);
    // token 0: 4/2 = 2, then -1 - 0.5*2 = 0; token 1: -1*2 = -2 (not generated); token 2 untouched.
    assert_eq!(logits, vec![0.0, -2.0, 4.0]);
}

#[test]
fn invalid_values_are_rejected_with_names() {
    for (p, needle) in [
        (
            SamplingParams {
                temperature: -0.1,
                ..SamplingParams::default()
            },
            "temperature",
        ),
        (
            SamplingParams {
                top_p: 0.0,
                ..SamplingParams::default()
            },
            "top_p",
        ),
        (
            SamplingParams {
                top_p: 1.5,
                ..SamplingParams::default()
            },
            "top_p",
        ),
        (
            SamplingParams {
                presence_penalty: 3.0,
                ..SamplingParams::default()
            },
            "presence_penalty",
        ),
    ] {
        let err = Sampler::new(p).err().unwrap().to_string();
        assert!(err.contains(needle), "{err}");
    }
}

#[test]
fn tiny_and_zero_temperatures_are_greedy() {
    let logits = [1.0, 5.0, 4.9, 0.0];
    for t in [0.0, 1e-30, f32::MIN_POSITIVE / 2.0, f32::from_bits(1), 1e-6] {
        let params = SamplingParams {
            temperature: t,
            seed: Some(3),
            ..SamplingParams::default()
        };
        assert!(params.is_greedy(), "{t}");
        let mut s = Sampler::new(params).unwrap();
        for _ in 0..20 {
            assert_eq!(s.pick(&logits), Some(1), "temperature {t}");
        }
    }
    // Just above the threshold it samples, and still never panics on huge logit gaps.
    let mut s = Sampler::new(SamplingParams {
        temperature: GREEDY_BELOW,
        seed: Some(3),
        ..SamplingParams::default()
    })
    .unwrap();
    assert_eq!(s.pick(&[f32::MAX, -f32::MAX, 0.0]), Some(0));
}

#[test]
fn non_finite_and_absurd_values_are_rejected_by_name() {
    let with = |f: &dyn Fn(&mut SamplingParams)| {
        let mut p = SamplingParams::default();
        f(&mut p);
        p
    };
    let cases: Vec<(SamplingParams, &str)> = vec![
        (with(&|p| p.temperature = f32::NAN), "temperature"),
        (with(&|p| p.temperature = f32::INFINITY), "temperature"),
        (with(&|p| p.temperature = f32::NEG_INFINITY), "temperature"),
        (with(&|p| p.temperature = -1e-30), "temperature"),
        (with(&|p| p.top_p = f32::NAN), "top_p"),
        (with(&|p| p.top_p = f32::INFINITY), "top_p"),
        (with(&|p| p.min_p = f32::NAN), "min_p"),
        (with(&|p| p.min_p = -0.5), "min_p"),
        (with(&|p| p.repetition_penalty = 0.0), "repetition_penalty"),
        (with(&|p| p.repetition_penalty = -1.0), "repetition_penalty"),
        (
            with(&|p| p.repetition_penalty = 1e-30),
            "repetition_penalty",
        ),
        (with(&|p| p.repetition_penalty = 1e30), "repetition_penalty"),
        (
            with(&|p| p.repetition_penalty = f32::NAN),
            "repetition_penalty",
        ),
        (
            with(&|p| p.repetition_penalty = f32::INFINITY),
            "repetition_penalty",
        ),
        (with(&|p| p.presence_penalty = f32::NAN), "presence_penalty"),
        (
            with(&|p| p.presence_penalty = f32::NEG_INFINITY),
            "presence_penalty",
        ),
        (
            with(&|p| p.frequency_penalty = f32::NAN),
            "frequency_penalty",
        ),
        (
            with(&|p| p.frequency_penalty = f32::INFINITY),
            "frequency_penalty",
        ),
        (with(&|p| p.logit_bias = vec![(3, 100.5)]), "logit_bias"),
        (with(&|p| p.logit_bias = vec![(3, f32::NAN)]), "logit_bias"),
        (
            with(&|p| p.logit_bias = vec![(1, 5.0), (3, f32::NEG_INFINITY)]),
            "logit_bias",
        ),
    ];
    for (p, needle) in cases {
        let err = Sampler::new(p.clone()).err().unwrap();
        assert!(matches!(err, EngineError::InvalidSampling(_)), "{p:?}");
        assert!(err.to_string().contains(needle), "{p:?}: {err}");
    }
}

#[test]
fn logit_bias_moves_the_named_tokens_and_is_checked_against_the_vocabulary() {
    let logits = [1.0f32, 3.0, 2.0, 0.5];
    let greedy_with = |bias: Vec<(u32, f32)>| {
        let mut s = Sampler::new(SamplingParams {
            logit_bias: bias,
            ..SamplingParams::greedy()
        })
        .unwrap();
        let mut l = logits;
        s.adjust(&mut l, &[], &[]);
        (s.pick(&l), l)
    };
    // Unbiased, token 1 wins; -100 bans it in effect, +100 forces token 3; the others stay as they were.
    assert_eq!(greedy_with(vec![]).0, Some(1));
    let (pick, l) = greedy_with(vec![(1, -100.0)]);
    assert_eq!((pick, l[0], l[2], l[3]), (Some(2), 1.0, 2.0, 0.5));
    assert_eq!(l[1], -97.0);
    assert_eq!(greedy_with(vec![(3, 100.0)]).0, Some(3));
    // A small bias shifts without deciding: 2.0 + 0.9 < 3.0, 2.0 + 1.1 > 3.0.
    assert_eq!(greedy_with(vec![(2, 0.9)]).0, Some(1));
    assert_eq!(greedy_with(vec![(2, 1.1)]).0, Some(2));
    let p = SamplingParams {
        logit_bias: vec![(3, 1.0), (4, 1.0)],
        ..SamplingParams::default()
    };
    p.validate_tokens(5).unwrap();
    let err = p.validate_tokens(4).unwrap_err().to_string();
    assert!(err.contains("logit_bias names token 4"), "{err}");
    assert!(err.contains("0 to 3"), "{err}");
}

/// Extreme parameters on extreme logits: either the parameters are refused up front, or `pick` returns a
/// drawable token (never panics, never draws a NaN or −∞ entry), the weights it draws from are finite and
/// positive, and `logprobs` is never NaN.
#[test]
fn fuzz_extreme_values_never_panic_or_yield_nan() {
    let extremes = [
        0.0,
        -0.0,
        1e-45,
        f32::MIN_POSITIVE,
        1e-30,
        1e-6,
        1e-5,
        0.01,
        0.5,
        1.0,
        1.5,
        2.0,
        100.0,
        1e30,
        f32::MAX,
        -1.0,
        -f32::MAX,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ];
    let logit_values = [
        0.0,
        1.0,
        -1.0,
        30.0,
        -30.0,
        1e30,
        -1e30,
        f32::MAX,
        -f32::MAX,
        1e-45,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ];
    let mut rng = StdRng::seed_from_u64(0xfeed);
    let mut accepted = 0;
    for case in 0..20_000 {
        // Each parameter is extreme with probability 1/2, else an ordinary value.
        let mut any = |ordinary: f32| {
            if rng.gen_bool(0.5) {
                extremes[rng.gen_range(0..extremes.len())]
            } else {
                ordinary
            }
        };
        let params = SamplingParams {
            temperature: any(0.8),
            top_p: any(0.9),
            min_p: any(0.05),
            repetition_penalty: any(1.1),
            presence_penalty: any(0.5),
            frequency_penalty: any(0.5),
            top_k: [0, 1, 2, 5, usize::MAX][case % 5],
            repeat_last_n: [0, 1, 64, usize::MAX][case % 4],
            seed: Some(case as u64),
            logit_bias: vec![(0, any(1.0)), (7, any(-3.0)), (u32::MAX, any(2.0))],
        };
        let n = rng.gen_range(1..40);
        let mut logits: Vec<f32> = (0..n)
            .map(|_| {
                if rng.gen_bool(0.5) {
                    logit_values[rng.gen_range(0..logit_values.len())]
                } else {
                    rng.gen_range(-20.0..20.0)
                }
            })
            .collect();
        let context: Vec<u32> = (0..rng.gen_range(0..60))
            .map(|_| rng.gen_range(0..n as u32 + 3))
            .collect();
        let generated = &context[context.len() / 2..];
        let Ok(mut sampler) = Sampler::new(params.clone()) else {
            continue;
        };
        accepted += 1;
        sampler.adjust(&mut logits, &context, generated);
        let drawable = logits
            .iter()
            .any(|l| !l.is_nan() && *l != f32::NEG_INFINITY);
        if let Some(Distribution::Weighted { cand, probs }) = sampler.distribution(&logits) {
            assert!(!cand.is_empty() && cand.len() == probs.len(), "{params:?}");
            assert!(
                probs.iter().all(|w| w.is_finite() && *w > 0.0),
                "{params:?} {logits:?}: {probs:?}"
            );
            assert!(probs.iter().sum::<f32>().is_finite());
        }
        match sampler.pick(&logits) {
            Some(id) => {
                let l = logits[id as usize];
                assert!(drawable, "{params:?} {logits:?}");
                assert!(
                    !l.is_nan() && l != f32::NEG_INFINITY,
                    "{params:?} {logits:?} -> {id}"
                );
                let (lp, top) = logprobs(&logits, id, 3);
                assert!(!lp.is_nan(), "{logits:?}");
                assert!(top.iter().all(|(_, x)| !x.is_nan()), "{logits:?}");
            }
            None => assert!(!drawable, "{params:?} {logits:?}"),
        }
    }
    assert!(
        accepted > 500,
        "the fuzz should exercise accepted parameters too ({accepted})"
    );
}

#[test]
fn logprobs_are_normalised() {
    let (lp, top) = logprobs(&[0.0, 0.0], 0, 2);
    assert!((lp - 0.5f32.ln()).abs() < 1e-6);
    assert_eq!(top.len(), 2);
}
