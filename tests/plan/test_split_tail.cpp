// test_split_tail.cpp - the split tail of the static walk (templates/common/split_tail.cuh, compiled
// here as host code) and the host's choice of it (plan/split_tail.hpp), without a GPU: every slot's
// key tiles walked exactly once, a cut slot's two parts at one boundary as the kernel derives it,
// at most kPiecesPerWalker pieces per walker, and the choices of the cost model.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "plan/device_code.hpp"
#include "plan/split_tail.hpp"

namespace tsattn::test {
namespace {

using tsattn_dev::kPiecesPerWalker;
using tsattn_dev::split_tail_walkable;
using tsattn_dev::tail_piece;
using tsattn_dev::TailPiece;

struct Walked {
  uint32_t walker, piece, first, count;
};

// Walks a launch the way the kernels' schedulers do and checks what every walker got.
void check_walk(uint32_t slots, uint32_t walkers, uint32_t steps) {
  const uint32_t tail = walkers + slots % walkers;
  REQUIRE(split_tail_walkable(slots, tail, walkers, steps));
  const uint32_t rounds = (slots - tail) / walkers;
  std::vector<int> whole_visits(slots, 0);
  std::map<uint32_t, std::vector<Walked>> parts;  // tail slot -> its pieces
  uint64_t busiest = 0;
  for (uint32_t w = 0; w < walkers; ++w) {
    for (uint32_t k = 0; k < rounds; ++k) ++whole_visits[w + k * walkers];
    uint64_t tiles = 0;
    int pieces = 0;
    for (uint32_t j = 0; j < kPiecesPerWalker + 1; ++j) {
      TailPiece piece{};
      if (!tail_piece(slots, tail, walkers, steps, w, j, piece)) continue;
      CHECK(j < kPiecesPerWalker);  // the walk never needs a fourth piece
      CHECK(piece.count >= 1);
      CHECK(piece.first + piece.count <= steps);
      CHECK(piece.whole == (piece.first == 0 && piece.count == steps));
      CHECK(piece.slot >= slots - tail);
      REQUIRE(piece.slot < slots);
      parts[piece.slot].push_back({w, j, piece.first, piece.count});
      tiles += piece.count;
      ++pieces;
    }
    CHECK(pieces >= 1);
    busiest = std::max(busiest, tiles);
  }
  for (uint32_t s = 0; s < slots - tail; ++s) CHECK(whole_visits[s] == 1);
  // Every walker's share is within one tile of F n / W.
  CHECK(busiest <= (uint64_t{tail} * steps + walkers - 1) / walkers);
  REQUIRE(parts.size() == tail);
  for (const auto& [slot, pieces] : parts) {
    CAPTURE(slot);
    if (pieces.size() == 1) {
      CHECK(pieces[0].first == 0);
      CHECK(pieces[0].count == steps);
      continue;
    }
    REQUIRE(pieces.size() == 2);
    // Sorted by walker: the first part from tile 0 is the earlier walker's last piece, the second
    // part to tile n the next walker's first piece; the kernel puts both at boundary = the later walker.
    const Walked& first = pieces[0];
    const Walked& second = pieces[1];
    CHECK(second.walker == first.walker + 1);
    CHECK(first.first == 0);
    CHECK(second.first == first.count);
    CHECK(second.first + second.count == steps);
    CHECK(second.piece == 0);
    TailPiece after{};
    CHECK_FALSE(tail_piece(slots, tail, walkers, steps, first.walker, first.piece + 1, after));
    const uint32_t boundary_of_first = first.walker + 1, boundary_of_second = second.walker;
    CHECK(boundary_of_first == boundary_of_second);
    CHECK(boundary_of_second >= 1);
    CHECK(boundary_of_second < walkers);
  }
}

TEST_CASE("split tail: every tile of the tail once, cut slots in two parts at one boundary") {
  // Dense D128 S2K / S4K / S8K / S2112 on 66 CTA pairs, and odd shapes around them.
  check_walk(256, 66, 13);
  check_walk(512, 66, 26);
  check_walk(1024, 66, 52);
  check_walk(272, 66, 14);
  check_walk(144, 66, 8);
  check_walk(128, 66, 7);  // every slot in the tail (F = S)
  check_walk(67, 66, 1);   // one tile per slot: no slot is cut
  check_walk(131, 66, 2);
  check_walk(4096, 132, 103);
  check_walk(7, 4, 3);
  check_walk(3, 2, 32767);      // the largest n the 32-bit arithmetic allows, at a small W
  check_walk(511, 256, 32767);  // and at the largest W
  for (uint32_t walkers = 1; walkers <= 9; ++walkers)
    for (uint32_t slots = walkers + 1; slots <= 4 * walkers + 3; ++slots)
      for (uint32_t steps = 1; steps <= 7; ++steps)
        if (slots % walkers != 0) check_walk(slots, walkers, steps);
}

TEST_CASE("split tail: walkable only within the 32-bit bounds and the tail's shape") {
  using tsattn_dev::kMaxSplitSteps;
  using tsattn_dev::kMaxSplitWalkers;
  CHECK(split_tail_walkable(1024, 100, 66, 52));
  CHECK_FALSE(split_tail_walkable(1024, 65, 66, 52));   // F < W
  CHECK_FALSE(split_tail_walkable(1024, 132, 66, 52));  // F >= 2 W
  CHECK_FALSE(split_tail_walkable(1024, 101, 66, 52));  // S - F not whole rounds
  CHECK_FALSE(split_tail_walkable(90, 100, 66, 52));    // F > S
  CHECK_FALSE(split_tail_walkable(1024, 100, 66, 0));   // no keys
  CHECK(split_tail_walkable(1024, 100, 66, kMaxSplitSteps));
  CHECK_FALSE(split_tail_walkable(1024, 100, 66, kMaxSplitSteps + 1));
  CHECK_FALSE(split_tail_walkable(100000, kMaxSplitWalkers + 2, kMaxSplitWalkers + 1, 4));
  // The largest product the walk forms, (w + 1) F n, stays below 2^32.
  CHECK(uint64_t{kMaxSplitWalkers} * (2 * kMaxSplitWalkers - 1) * kMaxSplitSteps < (uint64_t{1} << 32));
}

TEST_CASE("split tail: the host splits where the cost model predicts a shorter call") {
  // Dense D128 bf16 32/8 heads on an H200: 16 pair slots per 128-row tile, 66 CTA pairs, 160-key steps.
  CHECK(split_tail_slots(256, 66, 13, "auto") == 0);     // S2K: 3.9 rounds, the split saves too little
  CHECK(split_tail_slots(512, 66, 26, "auto") == 116);   // S4K: 7.8 rounds
  CHECK(split_tail_slots(1024, 66, 52, "auto") == 100);  // S8K: 15.5 rounds
  CHECK(split_tail_slots(272, 66, 14, "auto") == 74);    // S2112: 4.1 rounds
  CHECK(split_tail_slots(2048, 66, 103, "auto") == 68);  // S16K: 31.03 rounds
  CHECK(split_tail_slots(1056, 66, 53, "auto") == 0);    // S8448: 16 full rounds
  CHECK(split_tail_slots(256, 66, 13, "on") == 124);
  CHECK(split_tail_slots(1024, 66, 52, "off") == 0);
  CHECK(split_tail_slots(1056, 66, 53, "on") == 0);     // nothing to even out
  CHECK(split_tail_slots(60, 66, 13, "on") == 0);       // fewer slots than walkers: one round
  CHECK(split_tail_slots(1024, 66, 0, "on") == 0);      // no keys
  CHECK(split_tail_slots(1024, 300, 52, "on") == 0);    // more walkers than the walk allows
  CHECK(split_tail_slots(1024, 66, 40000, "on") == 0);  // more key tiles than the walk allows
}

}  // namespace
}  // namespace tsattn::test
