#!/usr/bin/env python3
"""Trains small tokenizers in each model family's tokenizer.json configuration and records what
Hugging Face `tokenizers` / `transformers` make of test strings and chat conversations.

The C++ tokenizer (core/tokenizer/) is checked token for token against these files
(tests/test_tokenizer_json.cpp, tests/test_chat_template.cpp). Nothing is downloaded: the
tokenizers are trained here over the corpus below, in the configuration each family's published
tokenizer.json uses (pre-tokenizer regexes, normalizers, decoders, byte fallback, added tokens),
and the chat templates are the families' published tokenizer_config.json templates with the tool
branches left out.

Run on the GPU machine (it has tokenizers + transformers):
    python3 tools/make_tokenizer_fixtures.py $OUT
It writes $OUT/tokenizer_fixtures.tar.gz; unpack it into tests/data/tokenizers/.
"""
import json
import os
import sys
import tarfile

import tokenizers
import transformers
from tokenizers import (Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                        trainers, AddedToken)

VOCAB_SIZE = 1200

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Mistral Nemo's tekken pre-tokenizer (tokenizer.json of Mistral-Nemo-Instruct-2407).
TEKKEN_PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
                  r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"
                  r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's 12:45 and we're late, aren't we?",
    "I'll say it again: THE MEETING IS AT 3 PM. Don't forget, they've said they'd come.",
    "Memory is the residue of thought; attention decides what stays and what fades.",
    "Die Straße ist nass, weil es geregnet hat. Über Nacht fielen 25 Millimeter Regen.",
    "Größere Mädchen und Jungen spielen Fußball im Garten hinter dem Haus.",
    "我们今天去公园散步，天气很好。模型的注意力机制决定了记忆的保留。",
    "東京は日本の首都です。カタカナとひらがなと漢字を使います。",
    "مرحبا بالعالم. هذه جملة باللغة العربية للاختبار.",
    "Emoji: 😀 😂 👍🏽 ❤️ 👨‍👩‍👧‍👦 👩🏾‍💻 🏳️‍🌈 🇩🇪 🇯🇵",
    "def add(a, b):\n    return a + b\n\nfor i in range(10):\n\tprint(i, add(i, 2))\n",
    "int main(void) {\n  printf(\"%d\\n\", 42);\n  return 0;\n}\n",
    "{\"key\": [1, 2, 3], \"nested\": {\"x\": null, \"y\": true}}",
    "Numbers: 0 1 22 333 4444 55555 666666 3.14159 2,718 1e-9 0x1F",
    "Whitespace   runs    here\t\ttabs\n\n\nnewlines   \n  indented\r\nwindows",
    "    four spaces then text, and trailing spaces    ",
    "URLs like https://example.com/path?q=1&r=2 and e-mail a.b@c.de",
    "Session 1 (February 11, 2024)\nUser said, \"I made lasagna.\"\nAssistant said, \"Nice!\"",
    "You are a helpful assistant. Answer briefly and truthfully.",
    "Hello! How are you today? I am fine, thank you. What about you?",
    "The system prompt says hello; the user asks a question; the assistant replies.",
]

TEST_STRINGS = [
    "",
    " ",
    "  ",
    "Hello world",
    " Hello world",
    "Hello  world  ",
    "It's late, isn't it? WE'LL SEE, they'D say.",
    "Die Straße über Nacht; Größe",
    "Gro\u0308\u00dfe (decomposed umlaut)",
    "我们今天去公园散步。",
    "東京はカタカナ",
    "مرحبا بالعالم",
    "👨‍👩‍👧‍👦 family, 👩🏾‍💻 coder, 🏳️‍🌈 flag 🇩🇪",
    "def f(x):\n    return x * 2\n\n\n\tindented\ttab",
    "a    b\t\t c\n\n d\r\n e   \n",
    "1234567890 12 123 1234 3.14159",
    "한국어 텍스트 ꙮ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ก่อน",
    "\u00a0non-breaking\u3000ideographic space\u2028line sep",
    "tab\tat\tend\t",
    "\n\nleading newlines",
    "trailing newlines\n\n",
    "   ",
    "x",
    "naïve café résumé",
    "<|im_start|>user\nhi<|im_end|>\n",
    "<s>[INST] hello [/INST] answer</s>",
    "text<|eot_id|>more <|start_header_id|>user<|end_header_id|>\n\nhi",
    "<think>\nplan\n</think>\n\nanswer",
    "<|endoftext|> after end",
    "ends with special <|endoftext|>",
]

# Random strings (fixed seed) built from pieces that stress the pre-tokenizer regexes and BPE:
# words of the corpus, letters of scripts the training never saw (byte fallback, raw bytes),
# combining marks, emoji sequences, whitespace runs of every kind, digit runs, contractions,
# punctuation runs and special-token spellings.
FUZZ_ATOMS = (
    [w for line in CORPUS for w in line.split()][:200]
    + list("abcXYZ019 .,;:!?-_'\"()[]{}<>/\\|@#$%^&*+=~`")
    + ["\u00e4", "\u00df", "\u00e9", "e\u0301", "u\u0308", "\u4e2d", "\u6587", "\u3042",
       "\u30ab", "\u0639", "\u0644", "\ud55c", "\uae00", "\u0e01", "\u0e48", "\ua66e",
       "\U0001d518", "\u00a0", "\u3000", "\u2028", "\u200b", "\u200d", "\ufe0f",
       "\U0001f600", "\U0001f44d\U0001f3fd", "\U0001f468\u200d\U0001f469\u200d\U0001f467",
       "\U0001f1e9\U0001f1ea", "\u2764\ufe0f"]
    + [" " * n for n in (1, 2, 3, 5, 8)] + ["\t", "\t\t", "\n", "\n\n", "\r\n", " \n ", "\n\n\n  "]
    + ["1", "12", "123", "1234", "12345678", "3.14", "1,000"]
    + ["'s", "'t", "'re", "'LL", "'D", "n't", "I'm"]
    + ["...", "!!", "?!", "--", "==>", "://", "```", "\"\"\""]
    + ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|begin_of_text|>",
       "<s>", "</s>", "[INST]", "[/INST]", "<think>", "</think>", "<|tool|>", " <|tool|> "])


def fuzz_strings(count, seed=19):
    import random
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        n = rng.randint(1, 14)
        out.append("".join(rng.choice(FUZZ_ATOMS) for _ in range(n)))
    return out


LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                   "<|end_header_id|>", "<|eot_id|>"]
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
SP_SPECIALS = ["<unk>", "<s>", "</s>"]


def byte_level(pattern, specials):
    """Llama-3 / Qwen2 / tekken: a Split with the family's regex, then ByteLevel without regex."""
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS * 3, trainer)
    return tok


def gpt2():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS * 3, trainer)
    return tok


def sentencepiece_bpe(style, specials):
    """Llama-2 / Mistral: BPE over "▁"-joined text with byte fallback; the vocabulary holds
    <0x00>..<0xFF> right after the specials, as SentencePiece-converted vocabularies do."""
    # limit_alphabet keeps rare characters out, so that byte fallback is exercised.
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=specials,
                                  limit_alphabet=120, show_progress=False)
    tok.train_from_iterator(CORPUS * 3, trainer)
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    order = specials + [f"<0x{b:02X}>" for b in range(256)]
    rest = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1]) if t not in order]
    data["model"]["vocab"] = {t: i for i, t in enumerate(order + rest)}
    for added in data["added_tokens"]:
        added["id"] = data["model"]["vocab"][added["content"]]
    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                 "split": False}
    if style == "llama2":
        # Llama-2 / Mistral v0.1 tokenizer.json: the dummy prefix is a normalizer.
        data["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
        data["pre_tokenizer"] = None
        data["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    else:
        # Mistral v0.3: Metaspace pre-tokenizer and decoder, prefix only on the first segment.
        data["normalizer"] = None
        data["pre_tokenizer"] = metaspace
        data["decoder"] = metaspace
    return Tokenizer.from_str(json.dumps(data))


# Chat templates as published in each family's tokenizer_config.json (tool branches left out).
QWEN25_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "{%- else %}\n"
    "    {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or "
    "(message.role == \"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n")

QWEN3_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}\n"
    "    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n"
    "{%- for message in messages[::-1] %}\n"
    "    {%- set index = (messages|length - 1) - loop.index0 %}\n"
    "    {%- if ns.multi_step_tool and message.role == \"user\" and message.content is string and "
    "not(message.content.startswith('<tool_response>') and "
    "message.content.endswith('</tool_response>')) %}\n"
    "        {%- set ns.multi_step_tool = false %}\n"
    "        {%- set ns.last_query_index = index %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- for message in messages %}\n"
    "    {%- if message.content is string %}\n"
    "        {%- set content = message.content %}\n"
    "    {%- else %}\n"
    "        {%- set content = '' %}\n"
    "    {%- endif %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {%- set reasoning_content = '' %}\n"
    "        {%- if message.reasoning_content is string %}\n"
    "            {%- set reasoning_content = message.reasoning_content %}\n"
    "        {%- else %}\n"
    "            {%- if '</think>' in content %}\n"
    "                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n')"
    ".split('<think>')[-1].lstrip('\\n') %}\n"
    "                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}\n"
    "            {%- endif %}\n"
    "        {%- endif %}\n"
    "        {%- if loop.index0 > ns.last_query_index %}\n"
    "            {%- if loop.last or (not loop.last and reasoning_content) %}\n"
    "                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + "
    "reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}\n"
    "            {%- else %}\n"
    "                {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
    "            {%- endif %}\n"
    "        {%- else %}\n"
    "            {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
    "        {%- endif %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
    "        {{- '<think>\\n\\n</think>\\n\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}")

LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}")

LLAMA31_TEMPLATE = (
    "{{- bos_token }}\n"
    "{%- if not date_string is defined %}\n"
    "    {%- set date_string = \"26 Jul 2024\" %}\n"
    "{%- endif %}\n"
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- set system_message = messages[0]['content']|trim %}\n"
    "    {%- set messages = messages[1:] %}\n"
    "{%- else %}\n"
    "    {%- set system_message = \"\" %}\n"
    "{%- endif %}\n"
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n"
    "{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n"
    "{{- system_message }}\n"
    "{{- \"<|eot_id|>\" }}\n"
    "{%- for message in messages %}\n"
    "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
    "message['content'] | trim + '<|eot_id|>' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
    "{%- endif %}\n")

# Mistral-Nemo-Instruct-2407 (v3 tekken): the system message goes into the last user turn.
MISTRAL_TEMPLATE = (
    "{%- if messages[0][\"role\"] == \"system\" %}\n"
    "    {%- set system_message = messages[0][\"content\"] %}\n"
    "    {%- set loop_messages = messages[1:] %}\n"
    "{%- else %}\n"
    "    {%- set loop_messages = messages %}\n"
    "{%- endif %}\n"
    "{{- bos_token }}\n"
    "{%- for message in loop_messages %}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
    "        {{- raise_exception('After the optional system message, conversation roles must "
    "alternate user/assistant/user/assistant/...') }}\n"
    "    {%- endif %}\n"
    "    {%- if message[\"role\"] == \"user\" %}\n"
    "        {%- if loop.last and system_message is defined %}\n"
    "            {{- \"[INST]\" + system_message + \"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}\n"
    "        {%- else %}\n"
    "            {{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}\n"
    "        {%- endif %}\n"
    "    {%- elif message[\"role\"] == \"assistant\" %}\n"
    "        {{- message[\"content\"] + eos_token}}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n")

CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}")

LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}"
    "{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and "
    "system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}"
    "{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + "
    "' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + "
    "eos_token }}{% endif %}{% endfor %}")

CONVERSATIONS = {
    "system_multi_turn": [
        {"role": "system", "content": "You are a helpful assistant. Answer briefly."},
        {"role": "user", "content": "Hello! What's the capital of Germany?"},
        {"role": "assistant", "content": "The capital of Germany is Berlin."},
        {"role": "user", "content": "And of Japan? 東京?"},
    ],
    "no_system": [
        {"role": "user", "content": "I made lasagna for dinner tonight."},
        {"role": "assistant", "content": "Lasagna sounds delicious. Did it turn out well?"},
        {"role": "user", "content": "Yes 😀, thanks!"},
    ],
    "whitespace_and_code": [
        {"role": "system", "content": "  You write code.\n"},
        {"role": "user", "content": "  Write add(a, b) in Python.  \n"},
        {"role": "assistant", "content": "def add(a, b):\n    return a + b\n"},
        {"role": "user", "content": "Now   in C,\tplease."},
    ],
}

# template name -> (template, fixture tokenizer, extra render arguments)
CHAT_TEMPLATES = {
    "qwen2.5": (QWEN25_TEMPLATE, "qwen2", {}),
    "qwen3": (QWEN3_TEMPLATE, "qwen2", {"enable_thinking": False}),
    "llama3": (LLAMA3_TEMPLATE, "llama3", {}),
    "llama3.1": (LLAMA31_TEMPLATE, "llama3", {}),
    "mistral": (MISTRAL_TEMPLATE, "tekken", {}),
    "chatml": (CHATML_TEMPLATE, "qwen2", {}),
    "llama2": (LLAMA2_TEMPLATE, "llama2_sp", {}),
}

# family -> (bos, eos) as the family's tokenizer_config.json names them
SPECIAL_NAMES = {
    "gpt2": (None, "<|endoftext|>"),
    "llama3": ("<|begin_of_text|>", "<|eot_id|>"),
    "qwen2": (None, "<|im_end|>"),
    "tekken": ("<s>", "</s>"),
    "llama2_sp": ("<s>", "</s>"),
    "mistral_sp": ("<s>", "</s>"),
}


def byte_token_ids(tok, family):
    """Id of the token that is exactly byte b (byte-level char or <0xNN>)."""
    vocab = tok.get_vocab()
    if family in ("llama2_sp", "mistral_sp"):
        return lambda b: vocab[f"<0x{b:02X}>"]
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    char_of = dict(zip(bs, [chr(c) for c in cs]))
    return lambda b: vocab[char_of[b]]


INVALID_BYTE_RUNS = [
    [0xE2, 0x82],              # truncated 3-byte sequence
    [0xFF],                    # never valid
    [0xF0, 0x9F, 0x98],        # truncated emoji
    [0xED, 0xA0, 0x80],        # UTF-16 surrogate
    [0xC0, 0x80],              # overlong NUL
    [0x61, 0xE2, 0x62],        # a <bad> b
    [0xE2, 0x82, 0xAC],        # valid euro sign
    [0x80, 0x80, 0x41],        # stray continuations
]


def main():
    out = sys.argv[1]
    root = os.path.join(out, "tokenizers")
    os.makedirs(root, exist_ok=True)
    fams = {
        "gpt2": gpt2(),
        "llama3": byte_level(LLAMA3_PATTERN, LLAMA3_SPECIALS),
        "qwen2": byte_level(QWEN2_PATTERN, QWEN_SPECIALS),
        "tekken": byte_level(TEKKEN_PATTERN, SP_SPECIALS + ["[INST]", "[/INST]"]),
        "llama2_sp": sentencepiece_bpe("llama2", SP_SPECIALS),
        "mistral_sp": sentencepiece_bpe("mistral", SP_SPECIALS + ["[INST]", "[/INST]"]),
    }
    # Qwen3's reasoning markers are added tokens that are not special (they decode as text).
    fams["qwen2"].add_tokens([AddedToken("<think>", special=False, normalized=False),
                              AddedToken("</think>", special=False, normalized=False)])
    fams["qwen2"].normalizer = normalizers.NFC()
    # Llama-2's tokenizer.json: an lstrip special token (as <mask>-style tokens use), to check flags.
    fams["llama2_sp"].add_special_tokens([AddedToken("<|tool|>", lstrip=True, rstrip=True,
                                                     normalized=False)])

    cases = {"versions": {"tokenizers": tokenizers.__version__,
                          "transformers": transformers.__version__},
             "families": {}}
    for name, tok in fams.items():
        # Round-trip through JSON so the file we ship is exactly what was tested.
        tok = Tokenizer.from_str(tok.to_str())
        fams[name] = tok
        d = os.path.join(root, name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"))
        bos, eos = SPECIAL_NAMES[name]
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump({"bos_token": bos, "eos_token": eos,
                       "tokenizer_class": "PreTrainedTokenizerFast"}, f, indent=1)
        encode = []
        test_strings = TEST_STRINGS + CORPUS[:6]
        for s in test_strings:
            ids = tok.encode(s, add_special_tokens=False).ids
            encode.append({"text": s, "ids": ids,
                           "decoded": tok.decode(ids, skip_special_tokens=True),
                           "decoded_with_special": tok.decode(ids, skip_special_tokens=False)})
        byte_id = byte_token_ids(tok, name)
        decode = []
        for run in INVALID_BYTE_RUNS:
            ids = [byte_id(b) for b in run]
            decode.append({"bytes": run, "ids": ids,
                           "decoded": tok.decode(ids, skip_special_tokens=True)})
            # the same bytes after an ordinary word
            word = tok.encode("Hello", add_special_tokens=False).ids
            decode.append({"bytes": [ord(c) for c in "Hello"] + run, "ids": word + ids,
                           "decoded": tok.decode(word + ids, skip_special_tokens=True)})
        fuzz = []
        for s in fuzz_strings(300):
            ids = tok.encode(s, add_special_tokens=False).ids
            fuzz.append({"text": s, "ids": ids,
                         "decoded": tok.decode(ids, skip_special_tokens=True)})
        cases["families"][name] = {"vocab_size": tok.get_vocab_size(with_added_tokens=True),
                                   "encode": encode, "decode": decode, "fuzz": fuzz}

    chat = {}
    for tmpl_name, (source, fam, kwargs) in CHAT_TEMPLATES.items():
        bos, eos = SPECIAL_NAMES[fam]
        hf = transformers.PreTrainedTokenizerFast(tokenizer_object=fams[fam], bos_token=bos,
                                                  eos_token=eos)
        hf.chat_template = source
        rendered = {}
        for conv_name, messages in CONVERSATIONS.items():
            text = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                          **kwargs)
            ids = fams[fam].encode(text, add_special_tokens=False).ids
            rendered[conv_name] = {"text": text, "ids": ids}
        chat[tmpl_name] = {"tokenizer": fam, "source": source, "kwargs": kwargs,
                           "conversations": rendered}
    with open(os.path.join(root, "cases.json"), "w") as f:
        json.dump(cases, f, ensure_ascii=False, separators=(",", ":"))
    with open(os.path.join(root, "chat_templates.json"), "w") as f:
        json.dump({"versions": cases["versions"], "conversations": CONVERSATIONS,
                   "templates": chat}, f, ensure_ascii=False, indent=1)
    with tarfile.open(os.path.join(out, "tokenizer_fixtures.tar.gz"), "w:gz") as tar:
        tar.add(root, arcname="tokenizers")
    import shutil
    shutil.rmtree(root)
    print("versions", cases["versions"])
    for name, tok in fams.items():
        print(name, tok.get_vocab_size(with_added_tokens=True))


if __name__ == "__main__":
    main()
