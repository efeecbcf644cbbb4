// Two ranks of one Gloo process group in one process (threads, a FileStore in a fresh temp dir), for the
// tests of the distributed pieces:
//
//   const auto errors = test::run_two_ranks([&](int rank, train::DistContext& dist) { ... });
//   EXPECT_EQ(errors[0], "");  EXPECT_EQ(errors[1], "");
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "hotpath/train/distributed.h"
#include "support/test_support.h"

namespace hotpath::test {

// Runs `body(rank, dist)` on two threads joined in one group, rank r agreeing on keys[r]; returns each
// rank's error text ("" = none), so a test sees every rank's failure, not just the first.
inline std::vector<std::string> run_two_ranks(const std::function<void(int, train::DistContext&)>& body,
                                              const std::vector<train::AgreementKeys>& keys = {{}, {}}) {
  TempDir dir;
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto dist = train::DistContext::connect_file(dir.file("store"), r, 2, std::chrono::seconds(30), keys[r]);
        body(r, *dist);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace hotpath::test
