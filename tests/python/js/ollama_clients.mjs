// The official `ollama` JavaScript library and the Vercel AI SDK's Ollama provider (`ollama-ai-provider-v2`)
// against agentd's Ollama API: a chat, a streamed chat, a tool round trip and a `format` (schema) request with
// each. Run by tests/python/test_ollama_clients.py with HOST (the server's root), KEY and MODEL set; prints one
// JSON object per check for the test to assert on.
import { Ollama } from 'ollama';
import { generateText, streamText, tool, Output, stepCountIs } from 'ai';
import { createOllama } from 'ollama-ai-provider-v2';
import { z } from 'zod';

const { HOST: host, KEY: key, MODEL: model } = process.env;
const headers = { Authorization: `Bearer ${key}` };
const out = (check, value) => console.log(JSON.stringify({ check, ...value }));
const weather = {
  type: 'function',
  function: {
    name: 'get_weather', description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

// --- the ollama library
const o = new Ollama({ host, headers });
out('js.list', { names: (await o.list()).models.map((m) => m.name) });
const chat = await o.chat({ model, messages: [{ role: 'user', content: 'Say hello.' }], options: { num_predict: 16 } });
out('js.chat', { content: chat.message.content, done: chat.done, eval_count: chat.eval_count, eval_duration: chat.eval_duration });
let streamed = ''; let parts = 0; let last = null;
for await (const part of await o.chat({ model, messages: [{ role: 'user', content: 'Count to five.' }], stream: true, options: { num_predict: 16 } })) {
  streamed += part.message.content; parts += 1; last = part;
}
out('js.stream', { content: streamed, parts, done: last.done, eval_count: last.eval_count });
const ask = [{ role: 'user', content: 'What is the weather in Oslo? Use the get_weather tool.' }];
const first = await o.chat({ model, messages: ask, tools: [weather], options: { num_predict: 64 } });
const calls = first.message.tool_calls ?? [];
const results = calls.map((c) => ({ role: 'tool', tool_name: c.function.name, content: `It is sunny in ${c.function.arguments.city}.` }));
const second = calls.length
  ? await o.chat({ model, messages: [...ask, first.message, ...results], tools: [weather], options: { num_predict: 48 } })
  : null;
out('js.tools', { calls: calls.map((c) => [c.function.name, c.function.arguments]), answer: second?.message ?? null });
const schema = { type: 'object', properties: { name: { type: 'string' }, capital: { type: 'string' } }, required: ['name', 'capital'] };
const fmt = await o.chat({ model, messages: [{ role: 'user', content: 'Tell me about France as JSON.' }], format: schema, options: { num_predict: 64 } });
out('js.format', { content: fmt.message.content, done_reason: fmt.done_reason });

// --- the Vercel AI SDK's Ollama provider
const ollama = createOllama({ baseURL: `${host}/api`, headers });
const text = await generateText({ model: ollama(model), prompt: 'Say hello.', maxOutputTokens: 16 });
out('ai.chat', { content: text.text, finish: text.finishReason, output_tokens: text.usage.outputTokens });
const st = streamText({ model: ollama(model), prompt: 'Count to five.', maxOutputTokens: 16 });
let acc = ''; let deltas = 0;
for await (const d of st.textStream) { acc += d; deltas += 1; }
out('ai.stream', { content: acc, deltas, output_tokens: (await st.usage).outputTokens });
const round = await generateText({
  model: ollama(model),
  prompt: 'What is the weather in Rome? Use the get_weather tool.',
  tools: { get_weather: tool({ description: 'The weather in a city', inputSchema: z.object({ city: z.string() }), execute: async ({ city }) => `It is sunny in ${city}.` }) },
  stopWhen: stepCountIs(2),
  maxOutputTokens: 64,
});
out('ai.tools', {
  calls: round.steps.flatMap((s) => s.toolCalls.map((c) => [c.toolName, c.input])),
  results: round.steps.flatMap((s) => s.toolResults.map((r) => r.output)),
  steps: round.steps.length,
  answer: round.text,
});
const structured = await generateText({
  model: ollama(model),
  prompt: 'Tell me about France.',
  output: Output.object({ schema: z.object({ name: z.string(), capital: z.string() }) }),
  maxOutputTokens: 64,
});
out('ai.format', { object: structured.output });
