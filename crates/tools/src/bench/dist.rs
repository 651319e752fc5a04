//! Value sizes and key choices: mcperf's size distributions (`d<n>`,
//! `u<min>,<max>`, `n<mean>,<sd>`, `e<mean>`) and key patterns over a key
//! space (sequential, uniform, zipfian, gaussian). Seeded, so a run can be
//! repeated exactly.

use rand::rngs::SmallRng;
use rand::Rng;
use rand_distr::{Distribution, Exp, Normal, Zipf};

/// How value sizes are drawn.
#[derive(Debug, Clone, PartialEq)]
pub enum SizeDist {
    Fixed(usize),
    Uniform { min: usize, max: usize },
    Normal { mean: f64, sd: f64 },
    Exponential { mean: f64 },
}

impl std::str::FromStr for SizeDist {
    type Err = String;

    /// mcperf's syntax: `d100`, `u1024,10240`, `n500,50`, `e1000`.
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || {
            format!("bad size distribution '{text}' (d<n>, u<min>,<max>, n<mean>,<sd>, e<mean>)")
        };
        let (kind, rest) = text.split_at(text.char_indices().nth(1).map_or(text.len(), |(i, _)| i));
        let numbers: Vec<f64> = rest
            .split(',')
            .map(|n| n.trim().parse::<f64>())
            .collect::<Result<_, _>>()
            .map_err(|_| bad())?;
        if numbers.iter().any(|n| !n.is_finite() || *n < 0.0) {
            return Err(bad());
        }
        match (kind, numbers.as_slice()) {
            ("d", [n]) => Ok(SizeDist::Fixed(*n as usize)),
            ("u", [min, max]) if min <= max => Ok(SizeDist::Uniform {
                min: *min as usize,
                max: *max as usize,
            }),
            ("n", [mean, sd]) => Ok(SizeDist::Normal {
                mean: *mean,
                sd: *sd,
            }),
            ("e", [mean]) if *mean > 0.0 => Ok(SizeDist::Exponential { mean: *mean }),
            _ => Err(bad()),
        }
    }
}

impl SizeDist {
    /// Draws a size, never below 1 byte nor above `max`.
    pub fn sample(&self, rng: &mut SmallRng, max: usize) -> usize {
        let size = match self {
            SizeDist::Fixed(n) => *n,
            SizeDist::Uniform { min, max } => rng.random_range(*min..=*max),
            SizeDist::Normal { mean, sd } => Normal::new(*mean, *sd)
                .map(|d| d.sample(rng).round().max(1.0) as usize)
                .unwrap_or(*mean as usize),
            SizeDist::Exponential { mean } => Exp::new(1.0 / mean)
                .map(|d| d.sample(rng).round().max(1.0) as usize)
                .unwrap_or(*mean as usize),
        };
        size.clamp(1, max.max(1))
    }

    /// The largest size this distribution can produce (for buffers).
    pub fn upper_bound(&self) -> usize {
        match self {
            SizeDist::Fixed(n) => *n,
            SizeDist::Uniform { max, .. } => *max,
            SizeDist::Normal { mean, sd } => (mean + 6.0 * sd) as usize,
            SizeDist::Exponential { mean } => (mean * 20.0) as usize,
        }
    }
}

/// How keys are picked from a key space of `count` keys.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyPattern {
    /// 0, 1, 2, … wrapping around.
    Sequential,
    Uniform,
    /// Zipf with exponent `s` (0.99 is the usual "skewed" workload).
    Zipfian {
        exponent: f64,
    },
    /// Normal around the middle of the key space, `sd` as a fraction of it.
    Gaussian {
        sd_fraction: f64,
    },
}

impl std::str::FromStr for KeyPattern {
    type Err = String;

    /// `sequential`, `uniform`, `zipf[:0.99]`, `gaussian[:0.1]`.
    fn from_str(text: &str) -> Result<Self, String> {
        let (name, parameter) = text
            .split_once(':')
            .map_or((text, None), |(n, p)| (n, Some(p)));
        let number = |default: f64| -> Result<f64, String> {
            parameter.map_or(Ok(default), |p| {
                p.parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v > 0.0)
                    .ok_or_else(|| format!("bad key pattern parameter '{p}'"))
            })
        };
        match name {
            "sequential" | "seq" => Ok(KeyPattern::Sequential),
            "uniform" | "random" => Ok(KeyPattern::Uniform),
            "zipf" | "zipfian" => Ok(KeyPattern::Zipfian {
                exponent: number(0.99)?,
            }),
            "gaussian" | "normal" => Ok(KeyPattern::Gaussian {
                sd_fraction: number(0.1)?,
            }),
            _ => Err(format!(
                "unknown key pattern '{text}' (sequential, uniform, zipf[:s], gaussian[:sd])"
            )),
        }
    }
}

/// Picks key indexes in `0..count` following a pattern.
pub struct KeyPicker {
    pattern: KeyPattern,
    count: u64,
    next: u64,
    zipf: Option<Zipf<f64>>,
    normal: Option<Normal<f64>>,
}

impl KeyPicker {
    /// `start` offsets the sequential pattern, so that several generators
    /// walking the same key space do not all begin at key 0.
    pub fn new(pattern: KeyPattern, count: u64, start: u64) -> Self {
        let count = count.max(1);
        let zipf = match pattern {
            KeyPattern::Zipfian { exponent } => Zipf::new(count as f64, exponent).ok(),
            _ => None,
        };
        let normal = match pattern {
            KeyPattern::Gaussian { sd_fraction } => {
                Normal::new(count as f64 / 2.0, count as f64 * sd_fraction).ok()
            }
            _ => None,
        };
        KeyPicker {
            pattern,
            count,
            next: start % count,
            zipf,
            normal,
        }
    }

    pub fn pick(&mut self, rng: &mut SmallRng) -> u64 {
        match self.pattern {
            KeyPattern::Sequential => {
                let key = self.next;
                self.next = (self.next + 1) % self.count;
                key
            }
            KeyPattern::Uniform => rng.random_range(0..self.count),
            // Zipf ranks start at 1: rank 1 is the hottest key, index 0.
            KeyPattern::Zipfian { .. } => self
                .zipf
                .as_ref()
                .map_or(0, |z| (z.sample(rng) as u64).clamp(1, self.count) - 1),
            KeyPattern::Gaussian { .. } => self.normal.as_ref().map_or(0, |n| {
                n.sample(rng).round().clamp(0.0, (self.count - 1) as f64) as u64
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn rng() -> SmallRng {
        SmallRng::seed_from_u64(42)
    }

    fn mean_and_sd(samples: &[f64]) -> (f64, f64) {
        let mean = samples.iter().sum::<f64>() / samples.len() as f64;
        let var = samples.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / samples.len() as f64;
        (mean, var.sqrt())
    }

    #[test]
    fn mcperf_size_syntax() {
        assert_eq!("d100".parse(), Ok(SizeDist::Fixed(100)));
        assert_eq!(
            "u1024,10240".parse(),
            Ok(SizeDist::Uniform {
                min: 1024,
                max: 10240
            })
        );
        assert_eq!(
            "n500,50".parse(),
            Ok(SizeDist::Normal {
                mean: 500.0,
                sd: 50.0
            })
        );
        assert_eq!("e1000".parse(), Ok(SizeDist::Exponential { mean: 1000.0 }));
        for bad in ["", "x5", "u10", "u10,5", "d-1", "dabc", "e0"] {
            assert!(bad.parse::<SizeDist>().is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes_match_their_parameters() {
        let mut rng = rng();
        let draw = |dist: &SizeDist, rng: &mut SmallRng| -> Vec<f64> {
            (0..100_000)
                .map(|_| dist.sample(rng, 1 << 20) as f64)
                .collect()
        };
        let uniform = draw(&"u1024,10240".parse().unwrap(), &mut rng);
        assert!(uniform.iter().all(|&s| (1024.0..=10240.0).contains(&s)));
        let (mean, _) = mean_and_sd(&uniform);
        assert!((mean - 5632.0).abs() < 60.0, "uniform mean {mean}");
        let (mean, sd) = mean_and_sd(&draw(&"n500,50".parse().unwrap(), &mut rng));
        assert!(
            (mean - 500.0).abs() < 2.0 && (sd - 50.0).abs() < 2.0,
            "normal {mean} {sd}"
        );
        let (mean, _) = mean_and_sd(&draw(&"e1000".parse().unwrap(), &mut rng));
        assert!((mean - 1000.0).abs() < 25.0, "exponential mean {mean}");
        assert!(draw(&"d64".parse().unwrap(), &mut rng)
            .iter()
            .all(|&s| s == 64.0));
    }

    #[test]
    fn sizes_are_clamped_to_the_item_limit() {
        let mut rng = rng();
        let dist: SizeDist = "e100000".parse().unwrap();
        assert!((0..10_000).all(|_| dist.sample(&mut rng, 1000) <= 1000));
    }

    #[test]
    fn key_patterns_match_their_parameters() {
        let mut rng = rng();
        let mut sequential = KeyPicker::new(KeyPattern::Sequential, 3, 1);
        let walk: Vec<u64> = (0..5).map(|_| sequential.pick(&mut rng)).collect();
        assert_eq!(walk, [1, 2, 0, 1, 2]);

        let mut uniform = KeyPicker::new(KeyPattern::Uniform, 1000, 0);
        let keys: Vec<f64> = (0..100_000)
            .map(|_| uniform.pick(&mut rng) as f64)
            .collect();
        assert!(keys.iter().all(|&k| k < 1000.0));
        let (mean, _) = mean_and_sd(&keys);
        assert!((mean - 499.5).abs() < 5.0, "uniform key mean {mean}");

        let mut gaussian = KeyPicker::new("gaussian:0.1".parse().unwrap(), 10_000, 0);
        let keys: Vec<f64> = (0..100_000)
            .map(|_| gaussian.pick(&mut rng) as f64)
            .collect();
        let (mean, sd) = mean_and_sd(&keys);
        assert!(
            (mean - 5000.0).abs() < 20.0 && (sd - 1000.0).abs() < 20.0,
            "gaussian {mean} {sd}"
        );

        // Zipf(0.99) over 1000 keys: key 0 takes about 1/H(1000, 0.99) ≈ 13% of picks.
        let mut zipf = KeyPicker::new("zipf:0.99".parse().unwrap(), 1000, 0);
        let picks: Vec<u64> = (0..100_000).map(|_| zipf.pick(&mut rng)).collect();
        assert!(picks.iter().all(|&k| k < 1000));
        let hottest = picks.iter().filter(|&&k| k == 0).count() as f64 / picks.len() as f64;
        let harmonic: f64 = (1..=1000).map(|k| 1.0 / (k as f64).powf(0.99)).sum();
        assert!(
            (hottest - 1.0 / harmonic).abs() < 0.01,
            "zipf head share {hottest}"
        );
    }
}
