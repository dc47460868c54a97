#!/usr/bin/env bash
# s53's torch run (never got a machine) is superseded by s54's, which runs the same files first and
# session 54's tests with them: docs/gpu_runs/2026-12-05-s54/scripts/run1.sh (BUDGET as there).
exec bash "$(dirname "$0")/../../2026-12-05-s54/scripts/run1.sh" "$@"
