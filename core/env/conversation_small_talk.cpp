#include "core/env/conversation_small_talk.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace engram::env {
namespace {

// {x} and {y} are filled from one entry of `fills` ("x|y"); {X} is {x} capitalised.
struct Topic {
  std::vector<std::string> user;
  std::vector<std::string> assistant;
  std::vector<std::string> fills;
};

const std::vector<Topic>& topics() {
  static const std::vector<Topic> t = {
      {{"It has been {x} all week here.", "The weather has been {x} lately."},
       {"A {x} week can really change the mood. Are you staying comfortable?",
        "Sorry to hear it has been {x}. I hope it turns soon."},
       {"rainy", "windy", "foggy", "unusually warm", "freezing cold", "gray and damp"}},
      {{"I made {x} for dinner tonight.", "I am thinking of cooking {x} tonight."},
       {"{X} sounds delicious. Did it turn out well?",
        "Nice choice! {X} is hard to beat on a weeknight."},
       {"lentil soup", "vegetable curry", "lasagna", "fried rice", "roast chicken",
        "mushroom risotto", "grilled salmon", "shakshuka", "stuffed peppers", "potato stew"}},
      {{"I only slept {x} hours last night.", "I got maybe {x} hours of sleep last night."},
       {"Only {x} hours is rough. Try to rest a bit today.",
        "That is not much sleep. Maybe go to bed early tonight?"},
       {"four", "five", "six"}},
      {{"I spent the afternoon running errands: {x} and groceries.",
        "Errands day today: {x}, then groceries."},
       {"Errands add up fast. Glad you got them done.",
        "That is a full afternoon. Did you get everything on your list?"},
       {"the post office", "the bank", "the hardware store", "the tailor", "the dry cleaner"}},
      {{"I tried a new coffee shop near {x} today.", "There is a new coffee shop near {x}."},
       {"A good coffee shop is a great find. Was it worth it?", "Nice! Did you like their coffee?"},
       {"the station", "my office", "the park", "the river", "the market"}},
      {{"I have been listening to a podcast about {x}.", "I found a great podcast about {x}."},
       {"A podcast about {x} sounds fascinating. Any good episode so far?",
        "That sounds interesting. What have you learned about {x}?"},
       {"space exploration", "ancient history", "ocean life", "economics", "true crime",
        "the human brain"}},
      {{"I finished a {x} piece puzzle this weekend.", "I started a {x} piece puzzle."},
       {"{X} pieces is impressive! That takes patience.",
        "A {x} piece puzzle is a big project. Enjoy it!"},
       {"500", "1000", "1500", "2000"}},
      {{"My commute took forever this morning because of {x}.",
        "I was late this morning because of {x}."},
       {"That sounds frustrating. Hopefully tomorrow is smoother.",
        "Ugh, {x} is the worst. I hope the rest of the day was better."},
       {"roadwork", "a broken signal", "heavy traffic", "a stalled train", "a detour"}},
      {{"The plants on my balcony are finally {x}.", "My houseplants are {x} again."},
       {"That is great to hear. A little green makes a home feel alive.",
        "Lovely! Plants really reward a bit of patience."},
       {"growing", "looking healthy", "putting out new leaves"}},
      {{"There is a {x} festival in town this weekend.", "I heard about a {x} festival nearby."},
       {"A {x} festival sounds fun. Are you planning to go?",
        "That sounds like a nice way to spend the weekend."},
       {"street food", "lantern", "kite", "chili", "harvest"}},
      {{"I spent the morning cleaning out the {x}.", "I finally tidied the {x} today."},
       {"Cleaning out the {x} feels so satisfying once it is done.",
        "Well done! A tidy {x} makes a big difference."},
       {"kitchen", "hallway closet", "pantry", "storage room", "attic"}},
      {{"I went for a long walk {x}.", "I took a walk {x} to clear my head."},
       {"A long walk is a great reset. How was it?", "That sounds peaceful. Walks help a lot."},
       {"after lunch", "at sunset", "before work", "along the river"}},
      {{"Work has been {x} this week.", "This week at work was {x}."},
       {"Thanks for sharing. I hope the rest of the week goes smoothly.",
        "Sounds like a week! Make sure to take a breather."},
       {"really hectic", "surprisingly calm", "full of meetings", "pretty slow"}},
      {{"I started watching a {x} series.", "I am hooked on a {x} series right now."},
       {"A {x} series is a good way to unwind. Is it any good?",
        "Nice! Let me know how the {x} series ends."},
       {"mystery", "nature documentary", "baking competition", "science fiction",
        "historical drama"}},
      {{"I have been practicing {x} in the evenings.", "I decided to learn {x}."},
       {"{X} takes practice. You are doing great by sticking with it.",
        "Good for you! A little {x} every day adds up."},
       {"Spanish", "French", "sign language", "juggling", "origami", "touch typing"}},
      {{"I am planning to {x} this weekend.", "This weekend I want to {x}."},
       {"That sounds like a good plan. Enjoy the weekend!",
        "Nice! A weekend to {x} sounds just right."},
       {"sleep in", "reorganize my desk", "try a new bakery", "catch up on emails",
        "bake some bread"}},
      {{"Can you suggest a quick {x}?", "Any idea for a quick {x}?"},
       {"How about {y}? It only takes a few minutes.", "Try {y}. Quick and easy."},
       {"breakfast|oatmeal with fruit", "lunch|a veggie wrap", "snack|yogurt with granola",
        "dinner|a tomato omelette"}},
      {{"Any tips for staying focused while working from home?"},
       {"Try short focused blocks with breaks, and keep your desk clear."},
       {}},
      {{"What is a good way to relax after a long day?"},
       {"A warm shower, some stretching and an early night usually help."},
       {}},
      {{"Do you have a tip for drinking more water?"},
       {"Keep a bottle on your desk and refill it every time it is empty."},
       {}},
      {{"Thanks for listening, by the way.", "Thanks for chatting with me."},
       {"Anytime. I am always here to chat.", "Of course! I enjoy our talks."},
       {}},
  };
  return t;
}

void replace_all(std::string& text, const std::string& key, const std::string& value) {
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size()))
    text.replace(at, key.size(), value);
}

std::string fill(std::string text, const std::string& entry) {
  const size_t bar = entry.find('|');
  const std::string x = entry.substr(0, bar);
  const std::string y = bar == std::string::npos ? "" : entry.substr(bar + 1);
  std::string cap = x;
  if (!cap.empty()) cap[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(cap[0])));
  replace_all(text, "{x}", x);
  replace_all(text, "{X}", cap);
  replace_all(text, "{y}", y);
  return text;
}

}  // namespace

SmallTalkExchange SmallTalk::next(SeededRng& rng) {
  constexpr size_t kRecent = 4;
  size_t index = rng.below(topics().size());
  while (std::find(recent_.begin(), recent_.end(), index) != recent_.end())
    index = (index + 1) % topics().size();
  recent_.push_back(index);
  if (recent_.size() > kRecent) recent_.erase(recent_.begin());
  const Topic& topic = topics()[index];
  const std::string entry = topic.fills.empty() ? "" : rng.pick(topic.fills);
  // The reply follows from the user's line (one reply per phrasing), as a consistent assistant's
  // would.
  const size_t variant = rng.below(topic.user.size());
  return {fill(topic.user[variant], entry),
          fill(topic.assistant[variant % topic.assistant.size()], entry)};
}

SmallTalkExchange session_greeting(SeededRng& rng) {
  static const std::vector<SmallTalkExchange> greetings = {
      {"Hi again!", "Welcome back! What is on your mind today?"},
      {"Hello, it is me again.", "Hi! Good to hear from you again."},
      {"Good morning!", "Good morning! How have you been?"},
      {"Hey, got a minute?", "Of course. What is up?"}};
  return rng.pick(greetings);
}

}  // namespace engram::env
