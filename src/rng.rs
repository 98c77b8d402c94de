//! SplitMix64 (Steele et al.; Vigna): tiny, fast, and fully specified, so prompt streams,
//! `--rate` arrivals and `--synthetic` lengths never change with a dependency upgrade.

#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The stream of `key` within `stream` of a seed (prompt synthesis: one per hash id).
    pub fn new(seed: u64, stream: u64, key: u64) -> Self {
        let mut s = SplitMix64(seed ^ stream.rotate_left(17));
        let mixed = s.next_u64() ^ key;
        SplitMix64(mixed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ stream)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (Lemire's multiply-shift; the bias is below 2^-40 for our `n`).
    pub fn below(&mut self, n: u64) -> usize {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as usize
    }

    /// Uniform in (0, 1).
    pub fn open01(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// A standard normal draw (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.open01(), self.open01());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// Gamma(shape, 1): Marsaglia and Tsang; a shape below 1 through Gamma(shape + 1).
    pub fn gamma(&mut self, shape: f64) -> f64 {
        if shape < 1.0 {
            return self.gamma(shape + 1.0) * self.open01().powf(1.0 / shape);
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = (1.0 + c * x).powi(3);
            if v <= 0.0 {
                continue;
            }
            let u = self.open01();
            if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                return d * v;
            }
        }
    }
}
