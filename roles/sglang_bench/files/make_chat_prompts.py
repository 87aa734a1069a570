"""Writes chat_prompts.json next to it: the benchmark's default prompt set (``sglang_bench_dataset: chat``).

    python roles/sglang_bench/files/make_chat_prompts.py

Generated text, nothing downloaded and nothing copied: every sentence comes from the templates below, filled from
fixed word lists with a fixed seed, so the file is the same on every run of this program (its origin is this
program; it is in the public domain, CC0). The set is in ShareGPT's format, which SGLang's benchmark client reads with
``--dataset-name sharegpt --dataset-path FILE``: a list of ``{"id", "conversations": [{"from": "human", "value"},
{"from": "gpt", "value"}]}``. The client takes the first two turns of each entry, so a multi-turn chat is written the
way a chat server sees its last turn: the human turn holds the conversation so far (``User:``/``Assistant:`` turns,
0 to 6 earlier exchanges) and ends with the new question; the gpt turn is a reply of the same register (the client
uses its length only when ``--sharegpt-output-len`` is not given). Prompts run from a short question to a few
thousand characters (a pasted log or code, a long history). Chat-shaped prompts matter for speculative decoding: a
draft model's accept length on random token ids is not its accept length on what users send.
"""

import json
import os
import random

SEED = 20260105
COUNT = 256
TOPICS = {
    "cooking": (["risotto", "sourdough bread", "a lentil soup", "roast vegetables", "a tomato sauce", "pancakes",
                 "a curry", "dumplings"],
                ["stir it", "let it rest", "add salt early", "use less water", "bake it longer", "toast the spices"]),
    "programming": (["a Python script", "a SQL query", "a bash loop", "a REST API", "a unit test", "a regular expression",
                     "a Dockerfile", "a React component"],
                    ["add logging", "handle the error", "write a test first", "split the function", "use a generator",
                     "check the input"]),
    "travel": (["a trip to Lisbon", "a weekend in the mountains", "a train journey across Europe", "a visit to Kyoto",
                "a road trip along the coast", "a city break in Prague"],
               ["book early", "pack light", "take the night train", "carry some cash", "learn a few phrases"]),
    "history": (["the printing press", "the Roman roads", "the Silk Road", "the steam engine", "medieval guilds",
                 "the first libraries"],
                ["read a primary source", "compare two accounts", "look at a map of the time", "check the dates"]),
    "gardening": (["tomatoes on a balcony", "a herb garden", "roses", "a compost heap", "an apple tree", "seedlings"],
                  ["water in the morning", "prune in winter", "add mulch", "rotate the crops", "test the soil"]),
    "fitness": (["a running plan", "stretching after work", "a first 10 km race", "strength training at home",
                 "cycling to work"],
                ["start slowly", "rest one day a week", "drink more water", "warm up first", "track the distance"]),
    "writing": (["a cover letter", "a short story", "a project proposal", "an email to a landlord", "a speech",
                 "a product description"],
                ["cut the first paragraph", "use shorter sentences", "name the reader", "end with a request"]),
    "math": (["compound interest", "a probability puzzle", "the area of a circle", "a system of two equations",
              "percentages", "the median of a list"],
             ["draw a picture", "try a small case", "write the units", "check the answer by substitution"]),
}
ASKS = ["How do I get started with {thing}?", "Can you explain {thing} in simple terms?",
        "What is the most common mistake with {thing}?", "I am stuck with {thing}. What should I try next?",
        "Give me a short plan for {thing}.", "Why does {thing} go wrong for me every time?",
        "Compare two ways of doing {thing}.", "What should I read about {thing}?"]
FOLLOW = ["And what if I {tip} instead?", "Thanks. Should I {tip} as well?", "That helped. Is it worth it to {tip}?",
          "Could you shorten that to three steps?", "What would you change for a beginner?",
          "Can you give an example with numbers?", "Why is that better than the usual way?"]
SAY = ["The first thing to do is to {tip}.", "Most people forget to {tip}, and it makes a difference.",
       "A good habit is to {tip} before anything else.", "If it still goes wrong, {tip} and try again.",
       "It depends on your situation, but usually you should {tip}.", "Many guides suggest that you {tip}.",
       "In my experience it is easier to {tip} than to start over.", "Keep notes of what you did, then {tip}."]
GLUE = ["That way you can see what changes.", "Do not try everything at once.", "Small steps are easier to check.",
        "You will get faster with practice.", "It is fine to make mistakes at first.",
        "Write down what worked for next time.", "Ask again if something is unclear."]
PASTE_LINE = ["line {n}: value={v} status=ok", "def step_{n}(x):\n    return x * {v}", "{n},{v},{w},done",
              "[{n:04d}] processed {v} items in {w} ms", "- item {n}: {v} units, {w} left"]


def reply(rng, tips, sentences):
    words = []
    for unused_sentence in range(sentences):
        words.append(rng.choice(SAY).format(tip=rng.choice(tips)))
        if rng.random() < 0.5:
            words.append(rng.choice(GLUE))
    return " ".join(words)


def paste(rng):
    lines = [rng.choice(PASTE_LINE).format(n=i, v=rng.randint(1, 999), w=rng.randint(1, 99))
             for i in range(rng.randint(8, 40))]
    return "Here is what I have:\n" + "\n".join(lines)


def conversation(rng, index):
    topic = rng.choice(sorted(TOPICS))
    things, tips = TOPICS[topic]
    thing = rng.choice(things)
    earlier = rng.choice([0, 0, 0, 1, 1, 2, 2, 3, 4, 6])
    turns = []
    question = rng.choice(ASKS).format(thing=thing)
    if rng.random() < 0.15:
        question += "\n" + paste(rng)
    for unused_turn in range(earlier):
        turns.append("User: " + question)
        turns.append("Assistant: " + reply(rng, tips, rng.randint(1, 5)))
        question = rng.choice(FOLLOW).format(tip=rng.choice(tips))
    human = "\n\n".join(turns + ["User: " + question]) if turns else question
    return {"id": "chat-%04d-%s" % (index, topic), "turns_before": earlier,
            "conversations": [{"from": "human", "value": human},
                              {"from": "gpt", "value": reply(rng, tips, rng.randint(2, 8))}]}


def main():
    rng = random.Random(SEED)
    data = [conversation(rng, i) for i in range(COUNT)]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "chat_prompts.json")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("[\n" + ",\n".join(json.dumps(entry, sort_keys=True) for entry in data) + "\n]\n")
    print("%s: %d conversations" % (path, len(data)))


if __name__ == "__main__":
    main()
