// The reference for Nereid's classification ordering and value formatting: Triton's
// AddClassResults (server src/classification.cc: std::sort of the indices by
// `probs[i1] > probs[i2]`, then std::to_string(value) + ":" + index) over generated rows
// with heavy ties, random bit patterns and inputs that reach the heap-sort fallback.
// Prints "<type> <count> <n> <element bits in hex>... | <strings>..." per case.
//
//   g++ -O2 -std=c++17 -o /tmp/classification_reference scripts/classification_reference.cc
//   /tmp/classification_reference > /tmp/golden.txt
//   NEREID_CLASSIFICATION_GOLDEN=/tmp/golden.txt \
//     cargo test --release -p nereid-core classification -- --ignored
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>
#include <cmath>
#include <limits>

// Orders indices by descending score with std::sort (as Triton does: not stable) and
// prints the first `req` as "<std::to_string(score)>:<index>".
template <typename T>
struct Greater {
  const std::vector<T>* scores;
  bool operator()(size_t a, size_t b) const { return (*scores)[a] > (*scores)[b]; }
};

template <typename T>
std::vector<std::string> Top(const std::vector<T>& scores, size_t req) {
  std::vector<size_t> order(scores.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), Greater<T>{&scores});
  std::vector<std::string> out;
  for (size_t i = 0; i < order.size() && i < req; ++i) {
    out.push_back(std::to_string(scores[order[i]]) + ":" + std::to_string(order[i]));
  }
  return out;
}

template <typename T> void Emit(const char* ty, const std::vector<T>& v, size_t req) {
  printf("%s %zu %zu", ty, req, v.size());
  for (const T& x : v) { uint64_t bits = 0; memcpy(&bits, &x, sizeof(T)); printf(" %llx", (unsigned long long)bits); }
  printf(" |");
  for (auto& s : Top(v, req)) printf(" %s", s.c_str());
  printf("\n");
}

int main() {
  std::mt19937_64 rng(12345);
  const size_t sizes[] = {1, 2, 5, 15, 16, 17, 18, 31, 33, 64, 100, 257, 1000, 4099};
  for (int rep = 0; rep < 40; ++rep) {
    for (size_t n : sizes) {
      size_t req = 1 + rng() % (n + 3);
      int distinct = 1 + rng() % 6;  // heavy ties
      { std::vector<uint8_t> v(n); for (auto& x : v) x = rng() % distinct; Emit("u8", v, req); }
      { std::vector<int32_t> v(n); for (auto& x : v) x = (int32_t)(rng() % (distinct * 3)) - distinct; Emit("i32", v, req); }
      { std::vector<float> v(n); for (auto& x : v) x = (float)(rng() % distinct) / 8.0f; Emit("f32", v, req); }
      { std::vector<float> v(n); for (auto& x : v) { uint32_t b = (uint32_t)rng(); memcpy(&x, &b, 4); if (std::isnan(x)) x = 0.5f; } Emit("f32", v, req); }
      { std::vector<double> v(n); for (auto& x : v) x = std::ldexp((double)(int64_t)(rng() % 2000001) - 1000000, -(int)(rng() % 30)); Emit("f64", v, req); }
      { std::vector<uint64_t> v(n); for (auto& x : v) x = rng(); if (n > 3) v[1] = v[2]; Emit("u64", v, req); }
      { std::vector<int64_t> v(n); for (auto& x : v) x = (int64_t)rng(); Emit("i64", v, req); }
      { std::vector<int8_t> v(n); for (auto& x : v) x = (int8_t)rng(); Emit("i8", v, req); }
      { std::vector<uint16_t> v(n); for (auto& x : v) x = (uint16_t)(rng() % distinct); Emit("u16", v, req); }
      { std::vector<int16_t> v(n); for (auto& x : v) x = (int16_t)rng(); Emit("i16", v, req); }
      { std::vector<uint32_t> v(n); for (auto& x : v) x = (uint32_t)(rng() % distinct); Emit("u32", v, req); }
    }
  }
  // formatting specials
  std::vector<float> sp = {0.0078125f, -0.0f, 1e20f, -1e-7f, 0.5f, 2.5e-6f, 1.0000005f, 3.4028235e38f, 1e-45f,
                           std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(), 0.1f, 0.3f, 123456.789f};
  Emit("f32", sp, sp.size());
  std::vector<double> dp = {0.0078125, 0.0000005, 0.0000015, 0.0000025, 1e300, -1e-300, 2.0000005, 0.1234565, 5e-324, 1.7976931348623157e308, -0.0};
  Emit("f64", dp, dp.size());
  // all equal, sorted ascending (heap fallback?), descending, organ pipe
  for (size_t n : {17, 100, 1000, 5000}) {
    std::vector<int32_t> a(n, 7); Emit("i32", a, n);
    std::vector<int32_t> b(n); for (size_t i = 0; i < n; ++i) b[i] = i % 3; Emit("i32", b, n);
    std::vector<int32_t> c(n); for (size_t i = 0; i < n; ++i) c[i] = (int32_t)std::min(i, n - i) / 2; Emit("i32", c, n);
    std::vector<int32_t> d(n); for (size_t i = 0; i < n; ++i) d[i] = (i * 7919) % 13; Emit("i32", d, n);
  }
  return 0;
}
