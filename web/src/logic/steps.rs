//! The step player behind the step controls: a cursor over a recorded list of steps that can
//! step, go back, play at a speed and pause, and stops by itself at the end.

/// Speeds offered by the controls, in steps per second.
pub const SPEEDS: [f64; 6] = [1.0, 2.0, 5.0, 10.0, 30.0, 60.0];

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepPlayer {
    /// Index of the step shown now, in `0..len` (0 when empty).
    pub position: usize,
    pub len: usize,
    pub playing: bool,
    pub speed: f64,
    /// Fraction of a step accumulated between ticks, so playback speed is independent of the
    /// timer's period.
    carry: f64,
}

impl StepPlayer {
    pub fn new(len: usize) -> Self {
        StepPlayer { position: 0, len, playing: false, speed: SPEEDS[2], carry: 0.0 }
    }

    pub fn at_end(&self) -> bool {
        self.len == 0 || self.position + 1 >= self.len
    }

    pub fn step(&mut self) {
        if !self.at_end() {
            self.position += 1;
        }
    }

    pub fn back(&mut self) {
        self.position = self.position.saturating_sub(1);
        self.playing = false;
    }

    pub fn seek(&mut self, position: usize) {
        self.position = position.min(self.len.saturating_sub(1));
    }

    /// Play from the start again if at the end, as media players do.
    pub fn play(&mut self) {
        if self.at_end() {
            self.position = 0;
        }
        self.playing = self.len > 1;
        self.carry = 0.0;
    }

    pub fn pause(&mut self) {
        self.playing = false;
    }

    pub fn set_speed(&mut self, speed: f64) {
        if speed.is_finite() && speed > 0.0 {
            self.speed = speed;
        }
    }

    /// Advances by the steps due after `elapsed_ms` of playback; pauses at the last step.
    pub fn tick(&mut self, elapsed_ms: f64) {
        if !self.playing {
            return;
        }
        self.carry += elapsed_ms.max(0.0) * self.speed / 1000.0;
        while self.carry >= 1.0 && !self.at_end() {
            self.carry -= 1.0;
            self.position += 1;
        }
        if self.at_end() {
            self.playing = false;
            self.carry = 0.0;
        }
    }

    /// Keeps the cursor valid when the recorded list changes length.
    pub fn set_len(&mut self, len: usize) {
        self.len = len;
        self.seek(self.position);
        if len <= 1 {
            self.playing = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn step_back_and_bounds() {
        let mut p = StepPlayer::new(3);
        p.back();
        assert_eq!(p.position, 0);
        p.step();
        p.step();
        p.step();
        assert_eq!(p.position, 2);
        assert!(p.at_end());
        p.back();
        assert_eq!(p.position, 1);
        p.seek(99);
        assert_eq!(p.position, 2);
        let mut empty = StepPlayer::new(0);
        empty.step();
        empty.play();
        assert_eq!((empty.position, empty.playing), (0, false));
    }

    #[test]
    fn playback_follows_speed_and_stops_at_end() {
        let mut p = StepPlayer::new(100);
        p.set_speed(10.0);
        p.play();
        // 10 steps/s: 16 ms ticks for one second advance exactly 10 steps in total.
        for _ in 0..62 {
            p.tick(16.0);
        }
        p.tick(8.0);
        assert_eq!(p.position, 10);
        p.pause();
        p.tick(10_000.0);
        assert_eq!(p.position, 10);
        p.play();
        p.tick(1e9);
        assert_eq!((p.position, p.playing), (99, false));
        // Play at the end restarts.
        p.play();
        assert_eq!((p.position, p.playing), (0, true));
        p.set_speed(-1.0);
        assert_eq!(p.speed, 10.0);
        p.set_len(1);
        assert_eq!((p.position, p.playing), (0, false));
    }
}
