#!/bin/sh
# check_baseline.sh -- builds the given runtime sources at -O3 for the compiler's baseline
# target (no -m flags; CC, default cc) and checks with objdump that instructions beyond
# baseline x86-64 appear only in mr_isa_avx2.o and mr_isa_avx512.o: no VEX or EVEX encoding
# (a mnemonic that starts with v, or a k mask instruction), no ymm, zmm or k register, no
# BMI, LZCNT, POPCNT, MOVBE or SSE3/SSSE3/SSE4 instruction anywhere else. Also checks that
# the variants' objects do hold their ISA's instructions (the check sees them). Prints one
# line per object; exits 1 on a violation. On another architecture it only says so.
#   usage: CC=gcc ./check_baseline.sh mr_gemm.c mr_conv.c ... mr_dispatch.c
set -eu
CC=${CC:-cc}
OBJDUMP=${OBJDUMP:-objdump}
case "$($CC -dumpmachine)" in
x86_64*) ;;
*) echo "check_baseline: $CC does not target x86-64, nothing to check"; exit 0 ;;
esac
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# Beyond baseline, as whole mnemonics: VEX/EVEX (v*, k*), BMI1/2, LZCNT, POPCNT, MOVBE,
# SSE3, SSSE3, SSE4.1 and SSE4.2 (x86-64's baseline ends at SSE2).
beyond='^(v[a-z0-9]*|k[a-z0-9]*|andn|bextr|blsi|blsmsk|blsr|bzhi|mulx|pdep|pext|rorx|sarx|shlx|shrx|lzcnt|tzcnt|popcnt|movbe|crc32[bwlq]?'\
'|addsubp[sd]|hadd[ps][sd]|hsubp[sd]|lddqu|movddup|movshdup|movsldup'\
'|pabs[bwd]|palignr|phadd[wd]|phaddsw|phsub[wd]|phsubsw|pmaddubsw|pmulhrsw|pshufb|psign[bwd]'\
'|blendp[sd]|blendvp[sd]|dpp[sd]|extractps|insertps|movntdqa|mpsadbw|packusdw|pblendvb|pblendw|pcmpeqq|pextr[bdq]'\
'|phminposuw|pinsr[bdq]|pmaxsb|pmaxsd|pmaxud|pmaxuw|pminsb|pminsd|pminud|pminuw|pmovsx[a-z]*|pmovzx[a-z]*|pmuldq|pmulld'\
'|ptest|round[ps][sd]|pcmpestr[im]|pcmpistr[im]|pcmpgtq)( |$)|%[yz]mm|%k[0-7]'
status=0
for src in "$@"; do
    obj="$dir/$(basename "$src" .c).o"
    $CC -std=c99 -pedantic -Wall -Wextra -Werror -O3 -c "$src" -o "$obj"
    # the mnemonic (third tab-separated field of an instruction line) and its operands
    $OBJDUMP -d --no-show-raw-insn "$obj" | awk -F'\t' 'NF >= 2 && $1 ~ /^ *[0-9a-f]+:$/ { sub(/^ +/, "", $2); print $2 }' >"$obj.s"
    n=$(grep -Ec "$beyond" "$obj.s" || true)
    ymm=$(grep -c '%ymm' "$obj.s" || true)
    zmm=$(grep -c '%zmm' "$obj.s" || true)
    case "$(basename "$src")" in
    mr_isa_avx2.c | mr_isa_avx512.c)
        want=ymm
        [ "$(basename "$src")" = mr_isa_avx512.c ] && want=zmm
        evex=$(grep -Ec '%zmm|%k[0-7]|%[xy]mm(1[6-9]|2[0-9]|3[01])' "$obj.s" || true)
        if [ "$want" = ymm ] && [ "$evex" -ne 0 ]; then
            echo "check_baseline: FAIL $(basename "$obj"): AVX-512 registers in the AVX2 variant"; status=1
        elif { [ "$want" = ymm ] && [ "$ymm" -eq 0 ]; } || { [ "$want" = zmm ] && [ "$zmm" -eq 0 ]; }; then
            echo "check_baseline: FAIL $(basename "$obj"): no $want instruction (is dispatch off?)"; status=1
        else
            echo "check_baseline: ok $(basename "$obj"): $n instructions beyond baseline ($ymm with ymm, $zmm with zmm)"
        fi
        ;;
    *)
        if [ "$n" -ne 0 ]; then
            echo "check_baseline: FAIL $(basename "$obj"): $n instructions beyond baseline x86-64:"
            grep -E "$beyond" "$obj.s" | sort | uniq -c | sort -rn | head -10
            status=1
        else
            echo "check_baseline: ok $(basename "$obj"): baseline x86-64 only"
        fi
        ;;
    esac
done
exit $status
