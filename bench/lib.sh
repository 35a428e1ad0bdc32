# lib.sh — what the bench scripts share (sourced).

# median: the median of the numbers on stdin, one a line
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
