// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <cmath>
#include <cstdint>

namespace tb {

// A small counter-seeded generator (SplitMix64). Each sample gets its own
// stream derived from (seed, a, b, c) - e.g. (seed, epoch, sample index) - so
// augmentation and shuffling never depend on which thread did the work or in
// what order. Written out by hand rather than with <random> distributions,
// whose output differs between standard libraries.
class SampleRng {
 public:
  explicit SampleRng(uint64_t seed, uint64_t a = 0, uint64_t b = 0, uint64_t c = 0) {
    uint64_t h = mix(seed ^ 0x6a09e667f3bcc909ull);
    h = mix(h ^ (a + 0x3c6ef372fe94f82bull));
    h = mix(h ^ (b + 0xa54ff53a5f1d36f1ull));
    h = mix(h ^ (c + 0x510e527fade682d1ull));
    state_ = h;
  }

  uint64_t next_u64() {
    state_ += 0x9e3779b97f4a7c15ull;
    return mix(state_);
  }
  // Uniform integer in [0, n), n > 0 (multiply-shift; bias < 2^-40 for our n).
  uint64_t uniform_int(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next_u64()) * n) >> 64);
  }
  // Uniform float in [0, 1) with 24 random bits.
  float uniform01() { return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f); }
  bool coin() { return (next_u64() >> 63) != 0; }
  // Standard normal (Box-Muller; one value per call keeps the stream simple).
  float normal() {
    const double u1 = (static_cast<double>(next_u64() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    const double u2 = static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0);
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }

  // SplitMix64 finaliser: a bijective 64-bit mixer.
  static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

}  // namespace tb
