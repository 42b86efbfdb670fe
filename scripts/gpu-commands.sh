# The suite's commands on the GPU, sourced by the GPU bundle's runner (gpu-bundle/run.sh, from
# scripts/gpu-run.sh; scripts/gpu-bundle.sh copies this file into the bundle): each `run_cmd LABEL
# COMMAND…` runs one command with the GPU and records it in the summary, its log in $logs/cmd-LABEL.log.
# Not a program of its own; a project made by scripts/new-project has none until it writes one.
run_cmd saxpy "$bundle/bin/saxpy" --device gpu
run_cmd conv "$bundle/bin/conv" --device gpu --width 4096 --height 4096 --runs 20 --check --output "$logs/conv.png"
run_cmd spiral "$bundle/bin/spiral" --new --seed 1 --device gpu --output "$logs/spiral.png"
run_cmd lombscargle "$bundle/bin/lombscargle" --device gpu --variant recurrence --precision f32 \
  --output "$logs/lombscargle.csv" --plot "$logs/lombscargle.png"
run_cmd bench "$bundle/bin/bench" --out-dir "$logs/bench"
