// A rank that stops on an error of its own (distributed.h, report_rank_error): two ranks on threads over a real
// TCPStore + Gloo group. Rank 1 fails after start-up (as a bad shard on its node would), leaves the group and
// reports; rank 0's next collective fails at once with one line naming rank 1 and its error, well within the
// timeout. And before start-up: rank 0 waiting in the agreement check stops on rank 1's report; --resume on one
// rank only is refused by the agreement check.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "hotpath/train/distributed.h"
#include "hotpath/train/from_recipe.h"

namespace hotpath::train {
namespace {

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

DistEnv env_for(int rank, int port) {
  DistEnv e;
  e.rank = rank;
  e.world_size = 2;
  e.local_rank = rank;
  e.local_world_size = 2;
  e.master_addr = "127.0.0.1";
  e.master_port = port;
  return e;
}

constexpr std::chrono::seconds kTimeout{60};

TEST(DistFaults, ARankFailingAfterStartUpIsNamedWithItsError) {
  const int port = free_port();
  std::string error0;
  double took_s = 0;
  std::thread rank1([&] {
    {
      auto dist = DistContext::connect(env_for(1, port), kTimeout, {});
    }  // the rank's training fails: its group is gone, then the CLI reports the error line
    report_rank_error(env_for(1, port), kTimeout, "data.train: shard-000003.tar: cannot open");
  });
  try {
    auto dist = DistContext::connect(env_for(0, port), kTimeout, {});
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const auto start = std::chrono::steady_clock::now();
    at::Tensor t = at::ones({4});
    dist->all_reduce_sum(t, "the initial broadcast");
    took_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } catch (const std::exception& e) {
    error0 = e.what();
  }
  rank1.join();
  EXPECT_NE(error0.find("distributed: rank 0: the initial broadcast failed: rank 1 stopped with an error: "
                        "data.train: shard-000003.tar: cannot open"),
            std::string::npos)
      << error0;
  EXPECT_LT(took_s, 30.0);
}

TEST(DistFaults, ARankFailingBeforeStartUpStopsTheAgreementWait) {
  const int port = free_port();
  std::string error0;
  const auto start = std::chrono::steady_clock::now();
  std::thread rank1([&] {  // a bad recipe: it never connects, it only reports
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    report_rank_error(env_for(1, port), kTimeout, "recipe.yaml: optimizer.lr: expected > 0");
  });
  try {
    auto dist = DistContext::connect(env_for(0, port), kTimeout, {});
  } catch (const std::exception& e) {
    error0 = e.what();
  }
  rank1.join();
  const double took_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(error0.find("rank 1 stopped with an error: recipe.yaml: optimizer.lr: expected > 0"), std::string::npos)
      << error0;
  EXPECT_LT(took_s, 30.0);
}

// --resume given to one rank only: the agreement check refuses it at start-up on both ranks with one line naming
// the option (without it rank 1 restored a checkpoint rank 0 did not, and both waited out the timeout).
TEST(DistFaults, ResumeOnOneRankOnlyIsRefusedAtStartUp) {
  const int port = free_port();
  const Recipe recipe;
  std::string errors[2];
  const auto start = std::chrono::steady_clock::now();
  std::thread rank1([&] {
    try {
      auto dist = DistContext::connect(env_for(1, port), kTimeout, recipe_agreement_keys(recipe, {.resume = true}));
    } catch (const std::exception& e) {
      errors[1] = e.what();
    }
  });
  try {
    auto dist = DistContext::connect(env_for(0, port), kTimeout, recipe_agreement_keys(recipe, {}));
  } catch (const std::exception& e) {
    errors[0] = e.what();
  }
  rank1.join();
  const double took_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const std::string& error : errors) {
    EXPECT_NE(error.find("distributed: rank 1's command line differs from rank 0's at --resume (true on rank 1, "
                         "false on rank 0); every rank must be started with the same --resume option"),
              std::string::npos)
        << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << "one line: " << error;
  }
  EXPECT_LT(took_s, 30.0) << "refused at start-up, not by the timeout";
}

// The same flags on every rank agree: the group forms.
TEST(DistFaults, TheSameLaunchFlagsAgree) {
  const int port = free_port();
  const Recipe recipe;
  std::string error1;
  std::thread rank1([&] {
    try {
      auto dist = DistContext::connect(env_for(1, port), kTimeout, recipe_agreement_keys(recipe, {.resume = true}));
      dist->barrier("test");
    } catch (const std::exception& e) {
      error1 = e.what();
    }
  });
  std::string error0;
  try {
    auto dist = DistContext::connect(env_for(0, port), kTimeout, recipe_agreement_keys(recipe, {.resume = true}));
    dist->barrier("test");
  } catch (const std::exception& e) {
    error0 = e.what();
  }
  rank1.join();
  EXPECT_EQ(error0, "");
  EXPECT_EQ(error1, "");
}

}  // namespace
}  // namespace hotpath::train
