#include <gtest/gtest.h>

#include "llm/common/text.hpp"

namespace hotpath::llm {
namespace {

TEST(LlmText, CountWordsUsesAsciiWhitespaceOnly) {
  EXPECT_EQ(count_words(""), 0u);
  EXPECT_EQ(count_words("   \t\n"), 0u);
  EXPECT_EQ(count_words("one"), 1u);
  EXPECT_EQ(count_words("  one two\tthree\r\nfour  "), 4u);
  EXPECT_EQ(count_words("don't stop-here, ok."), 3u);  // punctuation belongs to words
}

TEST(LlmText, WordStampedByChunkCarryingItsLastCharacter) {
  WordClock w;
  w.feed("hel", 1.0);
  w.feed("lo wor", 2.0);  // completes "hello"; "wor" open
  w.feed("ld", 3.0);      // "world" gets 3.0 when closed
  w.finish();
  EXPECT_EQ(w.words(), 2u);
  EXPECT_DOUBLE_EQ(w.first_stamp(), 2.0);
  EXPECT_DOUBLE_EQ(w.last_stamp(), 3.0);
  EXPECT_EQ(w.distinct_stamps(), 2u);
  ASSERT_TRUE(w.has_rate());
  EXPECT_DOUBLE_EQ(w.rate(), 1.0);  // (2 - 1) / (3 - 2)
}

TEST(LlmText, LeadingSpaceTokensDoNotDelayStamps) {
  // A tokenizer that puts the space in front (" world") completes "hello" with the first chunk.
  WordClock w;
  w.feed("hello", 1.0);
  w.feed(" world", 2.0);
  w.feed(" again", 4.0);
  w.finish();
  EXPECT_EQ(w.words(), 3u);
  EXPECT_DOUBLE_EQ(w.first_stamp(), 1.0);
  EXPECT_DOUBLE_EQ(w.last_stamp(), 4.0);
  EXPECT_DOUBLE_EQ(w.rate(), 2.0 / 3.0);
}

TEST(LlmText, ManyWordsInOneChunkShareItsStamp) {
  WordClock w;
  w.feed("a b c d", 1.0);  // one chunk: one distinct stamp, so no rate
  w.finish();
  EXPECT_EQ(w.words(), 4u);
  EXPECT_EQ(w.distinct_stamps(), 1u);
  EXPECT_FALSE(w.has_rate());
  w.feed(" e", 1.5);
  w.finish();
  EXPECT_EQ(w.words(), 5u);
  EXPECT_EQ(w.distinct_stamps(), 2u);
  EXPECT_DOUBLE_EQ(w.rate(), 4.0 / 0.5);
}

TEST(LlmText, WhitespaceOnlyChunksAddNothing) {
  WordClock w;
  w.feed(" ", 1.0);
  w.feed("\n\n", 2.0);
  w.finish();
  EXPECT_EQ(w.words(), 0u);
  EXPECT_FALSE(w.has_rate());
}

TEST(LlmText, RougeL) {
  EXPECT_DOUBLE_EQ(rouge_l("the cat sat", "the cat sat"), 1.0);
  EXPECT_DOUBLE_EQ(rouge_l("The Cat, sat.", "the cat sat"), 1.0);  // case and edge punctuation ignored
  EXPECT_DOUBLE_EQ(rouge_l("dog", "the cat sat"), 0.0);
  EXPECT_DOUBLE_EQ(rouge_l("", "the cat"), 0.0);
  // LCS("police killed the gunman", "police kill the gunman") = 3: P = R = 3/4.
  EXPECT_NEAR(rouge_l("police killed the gunman", "police kill the gunman"), 0.75, 1e-12);
  // LCS = 2 (a c): P = 2/3, R = 2/4, F = 2PR/(P+R) = 4/7.
  EXPECT_NEAR(rouge_l("a b c", "a x c y"), 4.0 / 7.0, 1e-12);
}

}  // namespace
}  // namespace hotpath::llm
