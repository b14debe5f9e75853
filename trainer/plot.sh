#!/usr/bin/env bash
# plot.sh: the curves of a tutti-train run, from its CSV log (--log), as a PNG.
#
#   trainer/plot.sh run.csv run.png [title]
#
# Left: train and test loss per epoch; right: train and test accuracy (%). Several logs can be
# compared by giving them as one comma-separated argument: trainer/plot.sh mlp.csv,cnn.csv out.png
# Needs gnuplot (Debian: gnuplot-nox).
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: $0 LOG.csv[,LOG2.csv...] OUT.png [title]" >&2; exit 2; }
logs=$1 out=$2 title=${3:-tutti-train}
command -v gnuplot >/dev/null || { echo "plot.sh: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 2; }
IFS=, read -r -a files <<<"$logs"
for f in "${files[@]}"; do [[ -s $f ]] || { echo "plot.sh: $f is missing or empty" >&2; exit 2; }; done
term=pngcairo
gnuplot -e 'set terminal pngcairo' 2>/dev/null || term=png

loss_plot="" acc_plot=""
for f in "${files[@]}"; do
  name=$(basename "$f" .csv)
  [[ ${#files[@]} -gt 1 ]] && tag="$name " || tag=""
  loss_plot+="'$f' using 1:3 with linespoints title '${tag}train', '$f' using 1:5 with linespoints title '${tag}test', "
  acc_plot+="'$f' using 1:(100*\$4) with linespoints title '${tag}train', '$f' using 1:(100*\$6) with linespoints title '${tag}test', "
done

gnuplot <<GNUPLOT
set terminal $term size 1200,480
set output '$out'
set datafile separator ','
set key autotitle columnhead
set multiplot layout 1,2 title '$title'
set grid
set xlabel 'epoch'
set ylabel 'cross-entropy loss'
set key top right
plot ${loss_plot%, }
set ylabel 'accuracy (%)'
set key bottom right
plot ${acc_plot%, }
unset multiplot
GNUPLOT
echo "plot.sh: wrote $out"
