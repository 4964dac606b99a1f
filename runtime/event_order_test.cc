#include "runtime/event_order.h"

#include <gtest/gtest.h>

#include "runtime/protocol.h"

namespace paseo::runtime {
namespace {

TEST(EventOrder, PipesGoStartedEofExit) {
  EventOrder order(/*pty=*/false, 2);
  EXPECT_EQ(*order.Started(), StartedEvent());
  EXPECT_EQ(*order.StreamEnded(), "");
  EXPECT_EQ(*order.StreamEnded(), EofEvent());
  EXPECT_EQ(*order.Exit(3, std::nullopt), ExitEvent(3, std::nullopt));
  EXPECT_TRUE(order.finished());
  EXPECT_EQ(order.Error("late"), "");
}

TEST(EventOrder, StreamsEndingBeforeStartedWaitForIt) {
  EventOrder order(false, 2);
  EXPECT_EQ(*order.StreamEnded(), "");
  EXPECT_EQ(*order.StreamEnded(), "");
  EXPECT_EQ(*order.Started(), StartedEvent() + EofEvent());
  EXPECT_TRUE(order.Exit(0, std::nullopt).ok());
}

TEST(EventOrder, RefusesOutOfOrderCalls) {
  EventOrder order(false, 1);
  EXPECT_FALSE(order.Exit(0, std::nullopt).ok());  // before started
  EXPECT_FALSE(order.Resized(1).ok());             // pipes never resize
  ASSERT_TRUE(order.Started().ok());
  EXPECT_FALSE(order.Started().ok());
  EXPECT_FALSE(order.Exit(0, std::nullopt).ok());  // before eof
  ASSERT_TRUE(order.StreamEnded().ok());
  EXPECT_FALSE(order.StreamEnded().ok());
  ASSERT_TRUE(order.Exit(0, std::nullopt).ok());
  EXPECT_FALSE(order.Exit(0, std::nullopt).ok());
}

TEST(EventOrder, PtyResizesBeforeStartedAreAckedRightAfterIt) {
  EventOrder order(/*pty=*/true, 1);
  EXPECT_EQ(*order.Resized(1), "");
  EXPECT_EQ(*order.Resized(2), "");
  EXPECT_EQ(*order.Started(), StartedEvent() + ResizedEvent(1) + ResizedEvent(2));
  EXPECT_EQ(*order.Resized(3), ResizedEvent(3));
  EXPECT_EQ(*order.StreamEnded(), EofEvent());
  EXPECT_FALSE(order.Resized(4).ok());  // after eof
  EXPECT_EQ(*order.Exit(std::nullopt, "SIGHUP"), ExitEvent(std::nullopt, "SIGHUP"));
}

TEST(EventOrder, AnErrorEndsTheStream) {
  EventOrder order(true, 1);
  ASSERT_TRUE(order.Started().ok());
  EXPECT_EQ(order.Error("broken"), ErrorEvent("broken"));
  EXPECT_TRUE(order.finished());
  EXPECT_EQ(order.Error("again"), "");
  EXPECT_EQ(*order.StreamEnded(), "");
  EXPECT_EQ(*order.Exit(0, std::nullopt), "");
}

TEST(EventOrder, AnErrorBeforeStartedIsTheOnlyEvent) {
  EventOrder order(false, 2);
  EXPECT_EQ(order.Error("sandbox not ready"), ErrorEvent("sandbox not ready"));
}

}  // namespace
}  // namespace paseo::runtime
