// Placeholder until the tokenizer lands.
namespace engram {}
