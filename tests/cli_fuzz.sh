#!/usr/bin/env bash
# cli_fuzz.sh MXLM WORKDIR [SEED] [SECONDS]: random option values and random bad files for
# mxlm train / prep / export / eval / sample / quant / study run / plot, reproducible from SEED (bash's RANDOM), bounded by
# SECONDS (default 20) of wall time. Each run must end with a documented exit status (train: 0 1 2 3
# 4 5, docs/using.md; the others 0 1 2), a message on stderr when it is not 0, and, on a usage error
# (2), nothing in the output folder it was given; no sanitizer report (the ASan build). Prints the
# failing command lines; exit 1 if any.
set -u
M=$1; W=$2; SEED=${3:-19}; SECS=${4:-20}
RANDOM=$SEED
mkdir -p "$W/f"
F=$W/f
# the files: a small valid run to export/eval/sample from, and bad ones
head -c 3000 /dev/urandom > "$F/rand.bin" 2>/dev/null || printf 'x%.0s' $(seq 3000) > "$F/rand.bin"
: > "$F/empty.bin"
mkdir -p "$F/adir" "$F/badrun"
printf 'layers = -3\ndim = x\n' > "$F/badrun/config.txt"
printf '{"text": "one"}\n{"text": 3}\n{bad json\n' > "$F/bad.jsonl"
printf '{"text": "in the beginning"}\n{"text": "was the word"}\n' > "$F/two.jsonl"
cp "$F/rand.bin" "$F/pct%s%n.bin"
$M train --steps 2 --batch 2 --seq 32 --val-tokens 64 --eval-every 0 --recipe bf16 --out "$F/run" --threads 1 \
    > "$W/base.log" 2>&1 || { echo "cli_fuzz: the base run failed"; cat "$W/base.log"; exit 1; }
head -c 2000 build/data/tiny_val.bin > "$F/trunc.bin"
head -c 8192 /dev/urandom > "$F/x.f32" 2>/dev/null || printf 'x%.0s' $(seq 8192) > "$F/x.f32" # 32 x 64 floats
FILES=("$F/rand.bin" "$F/empty.bin" "$F/adir" "$F/nothing.bin" "$F/pct%s%n.bin" "$F/trunc.bin" "$F/bad.jsonl"
       "$F/two.jsonl" "build/data/tiny_val.bin" "$F/badrun" "$F/run" "$F/run/ckpt-00000002.bin" "")
VALS=(-1 0 1 2 3 16 32 0.5 1.5 nan inf -inf 1e308 -0 abc "" "%s%n" 99999999999999999999 0x10 1e-9)
SMALL=(-1 0 1 2 3 nan abc "")
EVT=(-5 -1 1 2 64 nan abc "" 1e3 99999999999999999999 0x10)
pick() { local -n a=$1; printf '%s' "${a[RANDOM % ${#a[@]}]}"; }

T_OPTS=(lr beta1 beta2 adam-eps weight-decay clip warmup min-lr-frac threads keep ckpt-every eval-every layers
        bf16-first bf16-last spike-window spike-z max-skips target-loss halt-at seed log-every recipe preset device
        head attn on-nonfinite gemm sample-every telemetry-every rope-theta norm-eps)
T_SIZE=(steps batch seq accum val-tokens heads kv-heads dim ffn context vocab)
T_FILE=(train val init-from)
P_OPTS=(val-fraction val-docs shard-tokens threads format field encoding)
E_OPTS=(val-tokens seq batch recipe threads device format field)
S_OPTS=(tokens temperature top-k top-p seed threads recipe prompt)
ST_OPTS=(seeds parallel baseline target target-rule budget-factor machine threads lr steps preset device)
RECIPES=(bf16 fp32 mxfp4-fdw-h16 "bf16++" "mxfp4-fdw+w:had=h16+w:had=h32" nosuch "" "%s")
Q_OPTS=(rows cols scale round hadamard seed tensor-id rot-id tensor-scale)
Q_FMT=(mxfp4 nvfp4 mxfp8 e4m3 e5m2 bf16 nosuch "" "%s")
Q_LAYOUT=(1x32 32x1 32x32 1x16 16x1 16x16 2x2 "" abc)
Q_HAD=(none h16 rh32 h256 h3 h512 rh "" h16x)

fail=0; n=0; declare -A codes
end=$((SECONDS + SECS))
while [ $SECONDS -lt $end ]; do
    n=$((n + 1)); out="$W/o$n"; args=(); ok_codes="0 1 2"
    case $((RANDOM % 8)) in
    0) cmd=train; ok_codes="0 1 2 3 4 5"
       args=(--steps 2 --batch 2 --seq 32 --val-tokens 64 --eval-every 0 --threads 1 --recipe bf16 --out "$out")
       for _ in $(seq $((1 + RANDOM % 3))); do
           case $((RANDOM % 4)) in
           0) o=$(pick T_OPTS); if [ "$o" = recipe ]; then args+=(--recipe "$(pick RECIPES)"); else args+=("--$o" "$(pick VALS)"); fi ;;
           1) args+=("--$(pick T_SIZE)" "$(pick SMALL)") ;;
           2) args+=("--$(pick T_FILE)" "$(pick FILES)") ;;
           3) args+=(--resume) ;;
           esac
       done ;;
    1) cmd=prep
       args=(--encoding tiny --out "$out/p" --quiet)
       for _ in $(seq $((1 + RANDOM % 3))); do
           case $((RANDOM % 3)) in
           0) args+=("--$(pick P_OPTS)" "$(pick VALS)") ;;
           1) args+=(--train-pattern "$out/$(pick VALS).bin") ;;
           2) args+=(--val-pattern "$out/$(pick VALS)") ;;
           esac
       done
       args+=("$(pick FILES)") ;;
    2) cmd=export
       args=(--hf "$out/hf" --run "$(pick FILES)")
       [ $((RANDOM % 2)) = 0 ] && args+=(--ckpt "$(pick FILES)")
       [ $((RANDOM % 2)) = 0 ] && args+=(--ref-tokens "$(pick SMALL)") ;;
    3) cmd=eval
       args=(--run "$(pick FILES)")
       for _ in $(seq $((RANDOM % 3))); do
           o=$(pick E_OPTS)
           # --val-tokens 0 means every window of the validation set: valid, but minutes under ASan
           if [ "$o" = val-tokens ]; then args+=(--val-tokens "$(pick EVT)"); else args+=("--$o" "$(pick VALS)"); fi
       done
       [ $((RANDOM % 2)) = 0 ] && args+=(--val "$(pick FILES)") ;;
    4) cmd=sample
       args=(--run "$(pick FILES)" --tokens 4)
       for _ in $(seq $((RANDOM % 3))); do args+=("--$(pick S_OPTS)" "$(pick VALS)"); done ;;
    5) cmd=quant; mkdir -p "$out" # the output's folder exists: a usage error must leave it empty
       args=(--rows 32 --cols 64 --in "$F/x.f32" --out "$out/y.f32")
       for _ in $(seq $((1 + RANDOM % 3))); do
           case $((RANDOM % 5)) in
           0) args+=(--format "$(pick Q_FMT)") ;;
           1) args+=(--layout "$(pick Q_LAYOUT)") ;;
           2) args+=(--hadamard "$(pick Q_HAD)") ;;
           3) o=$(pick Q_OPTS) # --tensor-scale names a file: under the output folder, not the working directory
              if [ "$o" = tensor-scale ]; then args+=(--tensor-scale "$out/$(pick VALS)"); else args+=("--$o" "$(pick VALS)"); fi ;;
           4) args+=(--in "$(pick FILES)") ;;
           esac
       done ;;
    6) cmd=study # `study run`: its own options and the trainer's, checked before any run starts
       args=(run --out "$out" --recipes "$(pick RECIPES),bf16" --seeds 1 --steps 2 --batch 2 --seq 32 --val-tokens 64
             --eval-every 0 --threads 1)
       for _ in $(seq $((1 + RANDOM % 3))); do
           case $((RANDOM % 3)) in
           0) args+=("--$(pick ST_OPTS)" "$(pick VALS)") ;;
           1) args+=(--recipe "$(pick RECIPES)") ;;
           2) args+=("--$(pick T_OPTS)" "$(pick VALS)") ;;
           esac
       done ;;
    7) cmd=plot; mkdir -p "$out" # run directories (and not), SVG or PNG or a bad name, a title
       args=("$(pick FILES)")
       [ $((RANDOM % 2)) = 0 ] && args+=("$(pick FILES)")
       case $((RANDOM % 4)) in
       0) args+=(--out "$out/f.png") ;;
       1) args+=(--out "$out/f.svg") ;;
       2) args+=(--out "$out/$(pick VALS)") ;;
       3) args+=(--title "$(pick VALS)" --out "$out/t.png") ;;
       esac
       [ $((RANDOM % 3)) = 0 ] && args+=(--telemetry) ;;
    esac
    timeout 60 "$M" $cmd "${args[@]}" > "$W/out.log" 2> "$W/err.log"
    rc=$?
    codes[$rc]=$(( ${codes[$rc]:-0} + 1 ))
    line="mxlm $cmd$(printf " '%s'" "${args[@]}")"
    why=""
    case " $ok_codes " in *" $rc "*) ;; *) why="exit $rc" ;; esac
    [ -z "$why" ] && [ $rc -ne 0 ] && [ ! -s "$W/err.log" ] && why="exit $rc without a message on stderr"
    grep -qE "AddressSanitizer|LeakSanitizer|runtime error:" "$W/err.log" && why="a sanitizer report (exit $rc)"
    if [ -z "$why" ] && [ $rc -eq 2 ] && [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
        why="usage error but $(ls -A "$out" | head -3 | tr '\n' ' ')left in $out"
    fi
    if [ -n "$why" ]; then
        fail=$((fail + 1)); echo "cli_fuzz: $why: $line"; head -c 600 "$W/err.log"; echo
    fi
    rm -rf "$out"
done
summary=""; for k in "${!codes[@]}"; do summary+=" exit $k: ${codes[$k]},"; done
echo "cli_fuzz: seed $SEED, $n commands ($summary), $fail failures"
[ $fail -eq 0 ]
