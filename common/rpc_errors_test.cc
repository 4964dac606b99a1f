// The reason-token round trip: statuses become "<token>: <message>" exceptions, and a peer's
// exception becomes the same status again only when its token is one of the known ones.
#include "common/rpc_errors.h"

#include <gtest/gtest.h>

namespace paseo {
namespace {

kj::Exception Remote(const std::string& text) {
  return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                       kj::heapString(text.data(), text.size()));
}

TEST(RpcErrorsTest, StatusRoundTripsThroughAnException) {
  for (auto status : {absl::InvalidArgumentError("bad argv"), absl::PermissionDeniedError("no"),
                      absl::NotFoundError("no sandbox \"x\""), absl::AlreadyExistsError("dup"),
                      absl::FailedPreconditionError("ended"), absl::UnavailableError("later"),
                      absl::InternalError("oops"), absl::UnimplementedError("not yet")}) {
    absl::Status back = StatusFromException(StatusToException(status));
    EXPECT_EQ(back.code(), status.code()) << status;
    EXPECT_EQ(back.message(), status.message()) << status;
  }
}

TEST(RpcErrorsTest, ResourceExhaustedTravelsAsUnavailable) {
  auto e = StatusToException(absl::ResourceExhaustedError("too many"));
  EXPECT_STREQ(e.getDescription().cStr(), "unavailable: too many");
  EXPECT_EQ(StatusFromException(e).code(), absl::StatusCode::kUnavailable);
}

TEST(RpcErrorsTest, RemotePrefixesAreStripped) {
  auto s = StatusFromException(Remote("remote exception: remote exception: not-found: gone"));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "gone");
}

// Regression: anything before ": " used to count as a reason, so a capnp internal message
// such as "PromiseFulfiller was destroyed: ..." was forwarded as if it were a reason token.
TEST(RpcErrorsTest, UnknownTokensBecomeInternalAndKeepTheirText) {
  for (std::string text : {"PromiseFulfiller was destroyed: x", "disconnected: peer",
                           "not-founds: x", "not-found:x", "not-found", "", "internal"}) {
    auto s = StatusFromException(Remote(text));
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << text;
    EXPECT_EQ(s.message(), text) << text;
  }
}

TEST(RpcErrorsTest, ThrowIfErrorThrowsOnlyOnError) {
  EXPECT_NO_THROW(ThrowIfError(absl::OkStatus()));
  try {
    ThrowIfError(absl::PermissionDeniedError("uid 5 may not"));
    FAIL() << "no exception";
  } catch (const kj::Exception& e) {
    EXPECT_STREQ(e.getDescription().cStr(), "permission-denied: uid 5 may not");
  }
}

}  // namespace
}  // namespace paseo
