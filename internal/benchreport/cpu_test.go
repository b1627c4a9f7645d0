package main

import "testing"

func TestCPUCountsAgreeOnlyWhenTheirTwoLowestAreClose(t *testing.T) {
	for _, tc := range []struct {
		counts []int64
		want   bool
	}{
		{nil, false},
		{[]int64{100}, false},
		{[]int64{100, 101}, true},
		{[]int64{100, 103}, false},
		// the make bench run that read 970k a pair: both 2n runs spun
		{[]int64{1_100_000, 1_050_000}, false},
		{[]int64{1_100_000, 1_050_000, 600_000}, false},
		{[]int64{1_100_000, 600_000, 605_000}, true},
	} {
		if got := agree(tc.counts); got != tc.want {
			t.Errorf("agree(%v) = %v, want %v", tc.counts, got, tc.want)
		}
	}
}
