#!/bin/bash
# Each grid run scored alone, and one sharing run alone in place of the four (prints robustness.txt).
S7=benchmarks/2026-11-22-cpu/predictor/session7 S6=benchmarks/2026-11-22-cpu/predictor/session6
S5=benchmarks/2026-11-22-cpu/predictor/session5
IN="$S6/inputs_1 $S6/inputs_2 $S7/inputs"; SH="$S6/sharing $S7/sharing $S7/sharing_2 $S7/sharing_3"
for g in $S7/grid $S6/grid $S5/grid_nice15 $S5/grid_nice0; do
  echo "== grid $g alone"
  python -m benchmarks.predictor_validation --inputs $IN --sharing $SH --grid $g | grep "^sharing in trials"
done
echo "== sharing $S7/sharing_3 alone, the four grids"
python -m benchmarks.predictor_validation --inputs $IN --sharing $S7/sharing_3 \
  --grid $S7/grid $S6/grid $S5/grid_nice15 $S5/grid_nice0 | grep "^sharing in trials"
