#include "hotpath/core/process.h"

#include <gtest/gtest.h>

namespace hotpath {
namespace {

TEST(RunCommand, CapturesStdoutAndExitCode) {
  const CommandResult ok = run_command({"/bin/sh", "-c", "printf 'a b'; exit 0"});
  EXPECT_EQ(ok.exit_code, 0);
  EXPECT_EQ(ok.output, "a b");
  EXPECT_EQ(run_command({"/bin/sh", "-c", "exit 3"}).exit_code, 3);
}

TEST(RunCommand, PassesArgumentsWithQuotesAndSpacesVerbatim) {
  const CommandResult r = run_command({"/bin/sh", "-c", "printf '%s|' \"$@\"", "sh", "it's", "two words", "$HOME"});
  EXPECT_EQ(r.output, "it's|two words|$HOME|");
}

}  // namespace
}  // namespace hotpath
