// Make the committed tokenizer golden fixtures (tests/fixtures/tokenizer/), from the npm references:
//   <enc>.<text>.ids      the reference's ids for each fixture text (tools/ref_encode.mjs)
//   <enc>.trim.tiktoken   the reference rank file trimmed to the tokens the fixture texts can reach:
//                         every token whose bytes are a substring of a pre-token piece of the texts
//                         (split with the reference's own JavaScript regex), plus all 256 single bytes.
//                         BPE on a piece only looks up substrings of it, so the trimmed file gives the
//                         same ids on these texts with the original rank numbers.
//   node tools/make_golden.mjs      (after tools/fetch_tokenizers.sh; run from the repo root)
import { readFileSync, writeFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
const dir = "tests/fixtures/tokenizer";
const texts = ["nasty", "invalid_utf8"];
const C = String.raw`'(?:[sS]|[dD]|[mM]|[tT]|[lL][lL]|[vV][eE]|[rR][eE])`;
const pats = {
  r50k_base: /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu,
  cl100k_base: new RegExp(String.raw`${C}|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s+$|\s*[\r\n]|\s+(?!\S)|\s`, "gu"),
  o200k_base: new RegExp(String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:${C})?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:${C})?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`, "gu"),
  llama3: new RegExp(String.raw`(?:'([sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`, "gu"),
};
for (const [enc, re] of Object.entries(pats)) {
  const need = new Set();
  for (let b = 0; b < 256; b++) need.add(Buffer.from([b]).toString("base64"));
  for (const t of texts) {
    const text = new TextDecoder("utf-8").decode(readFileSync(`${dir}/${t}.txt`));
    for (const [piece] of text.matchAll(re)) {
      const bytes = Buffer.from(piece, "utf8");
      for (let i = 0; i < bytes.length; i++)
        for (let j = i + 1; j <= bytes.length; j++) need.add(bytes.subarray(i, j).toString("base64"));
    }
    const ids = execFileSync("node", ["tools/ref_encode.mjs", enc, "text", `${dir}/${t}.txt`], { maxBuffer: 1 << 28 });
    writeFileSync(`${dir}/${enc}.${t}.ids`, ids);
  }
  const lines = readFileSync(`data/tokenizers/${enc}.tiktoken`, "utf8").split("\n").filter((l) => l && need.has(l.split(" ")[0]));
  writeFileSync(`${dir}/${enc}.trim.tiktoken`, lines.join("\n") + "\n");
  console.log(`${enc}: ${lines.length} ranks kept`);
}
