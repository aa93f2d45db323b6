// Deterministic stress text for the tokenizer comparison: random mixtures of ASCII words,
// digits, whitespace runs, contractions, and code points from many scripts and categories.
//   node tools/gen_stress.mjs BYTES [random-bmp] > stress.txt
// With "random-bmp" also uniformly random BMP/astral code points (includes characters assigned after
// Unicode 15.0, where node's ICU tables and our generated ones may disagree).
let s = 0x12345678;
const rnd = () => { s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0; return s / 4294967296; };
const pick = (a) => a[Math.floor(rnd() * a.length)];
const target = Number(process.argv[2] || 1000000), wild = process.argv[3] === "random-bmp";
const words = ["the", "The", "THE", "don't", "DON'T", "it's", "I'm", "we'll", "they've", "you're", "he'd", "'s", "'LL",
  "HELLOworld", "camelCase", "snake_case", "e-mail", "naïve", "café", "Straße", "ǅemal", "ʰello", "İi", "Σίσυφος", "Привет",
  "שלום", "مرحبا", "नमस्ते", "中文", "日本語", "한국어", "ไทย", "😀", "👩‍👩‍👧", "🇫🇷", "1", "12", "123", "1234567", "3.14",
  "٣٤٥", "½", "Ⅻ", "x²", "a\u0301", "\u0301", "//", "http://x.y/z", "<|endoftext|>", "...", "!!!", "--", "\\n", "\t"];
const spaces = [" ", " ", " ", "  ", "   ", "\n", "\n\n", "\r\n", "\t", " \n", "\n ", "\u00a0", "\u3000", "\u2009", "\u0085", "\u200b", "\u2028"];
const ranges = [[0x20, 0x7e], [0xa0, 0x24f], [0x300, 0x36f], [0x370, 0x3ff], [0x400, 0x4ff], [0x590, 0x6ff], [0x900, 0x97f],
  [0xe00, 0xe7f], [0x1100, 0x11ff], [0x1e00, 0x1fff], [0x2000, 0x206f], [0x2100, 0x22ff], [0x3000, 0x30ff], [0x4e00, 0x4fff],
  [0xac00, 0xad00], [0xff00, 0xffef], [0x1d400, 0x1d7ff], [0x1f300, 0x1faff]];
const parts = [];
let bytes = 0;
const add = (x) => { parts.push(x); bytes += Buffer.byteLength(x); };
while (bytes < target) {
  const r = rnd();
  if (r < 0.45) add(pick(words));
  else if (r < 0.75) add(pick(spaces));
  else if (r < 0.95) { const [a, b] = pick(ranges); add(String.fromCodePoint(a + Math.floor(rnd() * (b - a + 1)))); }
  else if (wild) { let c = Math.floor(rnd() * 0x30000); if (c >= 0xd800 && c <= 0xdfff) c = 0x41; add(String.fromCodePoint(c)); }
  else add(pick(["'", "'s", "'t", "'re", "''", "' ", "0", "/", "\r", "\n\n\n", "    "]));
}
process.stdout.write(parts.join(""));
