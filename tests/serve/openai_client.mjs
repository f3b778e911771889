// engram-cli serve through the official `openai` npm client (issue 19): the client's own
// requests and parsing, non-streaming and streaming, the model list, a stored conversation (the
// engram_conversation extension passed as an extra body field) and a 404 the client raises as
// its NotFoundError.
// Usage: node openai_client.mjs BASE_URL MODEL_ID (BASE_URL ends with /v1)
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'not-needed-locally', maxRetries: 0 });

const models = await client.models.list();
assert.deepEqual(models.data.map((m) => m.id), [model]);

const messages = [{ role: 'user', content: 'Hello! What should I pack for a trip to the sea?' }];
const answer = await client.chat.completions.create({
  model, messages, temperature: 0, max_tokens: 32,
});
const text = answer.choices[0].message.content;
assert.ok(text.trim().length > 0, 'non-streaming content is empty');
assert.equal(answer.choices[0].message.role, 'assistant');
assert.equal(answer.usage.total_tokens, answer.usage.prompt_tokens + answer.usage.completion_tokens);
console.log(`non-streaming: ${JSON.stringify(text)} (${answer.usage.completion_tokens} tokens)`);

const stream = await client.chat.completions.create({
  model, messages, temperature: 0, max_tokens: 32, stream: true,
  stream_options: { include_usage: true },
});
let streamed = '';
let chunks = 0;
let usage = null;
let finish = null;
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  const choice = chunk.choices[0];
  if (!choice) continue;
  if (choice.delta.content) {
    streamed += choice.delta.content;
    chunks += 1;
  }
  if (choice.finish_reason) finish = choice.finish_reason;
}
assert.equal(streamed, text, 'streamed chunks differ from the non-streaming text');
assert.ok(chunks > 1, 'the stream came in one piece');
assert.equal(finish, answer.choices[0].finish_reason);
assert.deepEqual(usage, answer.usage);
console.log(`streaming: ${chunks} chunks, same text and usage`);

const conversation = `npm-client-${process.pid}`;
const first = await client.chat.completions.create({
  model, temperature: 0, max_tokens: 16, engram_conversation: conversation,
  messages: [{ role: 'user', content: 'My name is Ada.' }],
});
const second = await client.chat.completions.create({
  model, temperature: 0, max_tokens: 16, engram_conversation: conversation,
  messages: [{ role: 'user', content: 'What is my name?' }],
});
assert.ok(second.usage.prompt_tokens >
              first.usage.prompt_tokens + first.usage.completion_tokens - 2,
          'the second turn does not hold the first');
console.log(`conversation: prompt ${first.usage.prompt_tokens} -> ${second.usage.prompt_tokens} tokens`);

await assert.rejects(
  client.chat.completions.create({ model: 'gpt-4o', messages }),
  (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === 'model_not_found',
);
await assert.rejects(
  client.chat.completions.create({ model, messages, temperature: 7 }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === 'temperature',
);
console.log('errors: 404 model_not_found and 400 temperature as the client\'s error classes');
console.log('openai npm client: all checks passed');
