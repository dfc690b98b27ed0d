//! Go's `sort.Slice` (pattern-defeating quicksort), which cel-go's `sort` and `sortBy` use: a
//! list sorts into the same order as in Kubernetes, equal keys and keys no order relates
//! (NaN) included. Any `less`, consistent or not, terminates without panicking.

/// Sorts `v` in place as Go's `sort.Slice(v, less)` does.
pub(crate) fn sort_slice<T>(v: &mut [T], less: impl FnMut(&T, &T) -> bool) {
    let n = v.len() as isize;
    let limit = bit_len(n as u64) as isize;
    let mut s = Sorter { v, less };
    s.pdqsort(0, n, limit);
}

/// The number of bits needed to represent `x` (Go's `bits.Len`).
fn bit_len(x: u64) -> u32 {
    u64::BITS - x.leading_zeros()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Hint {
    Unknown,
    Increasing,
    Decreasing,
}

struct Sorter<'v, T, F> {
    v: &'v mut [T],
    less: F,
}

impl<T, F: FnMut(&T, &T) -> bool> Sorter<'_, T, F> {
    fn less(&mut self, i: isize, j: isize) -> bool {
        let (Ok(i), Ok(j)) = (usize::try_from(i), usize::try_from(j)) else {
            return false;
        };
        match (self.v.get(i), self.v.get(j)) {
            (Some(a), Some(b)) => (self.less)(a, b),
            _ => false,
        }
    }

    fn swap(&mut self, i: isize, j: isize) {
        if let (Ok(i), Ok(j)) = (usize::try_from(i), usize::try_from(j))
            && i < self.v.len()
            && j < self.v.len()
        {
            self.v.swap(i, j);
        }
    }

    fn insertion_sort(&mut self, a: isize, b: isize) {
        for i in a + 1..b {
            let mut j = i;
            while j > a && self.less(j, j - 1) {
                self.swap(j, j - 1);
                j -= 1;
            }
        }
    }

    fn sift_down(&mut self, lo: isize, hi: isize, first: isize) {
        let mut root = lo;
        loop {
            let mut child = 2 * root + 1;
            if child >= hi {
                return;
            }
            if child + 1 < hi && self.less(first + child, first + child + 1) {
                child += 1;
            }
            if !self.less(first + root, first + child) {
                return;
            }
            self.swap(first + root, first + child);
            root = child;
        }
    }

    fn heap_sort(&mut self, a: isize, b: isize) {
        let (first, hi) = (a, b - a);
        let mut i = (hi - 1) / 2;
        while i >= 0 {
            self.sift_down(i, hi, first);
            i -= 1;
        }
        let mut i = hi - 1;
        while i >= 0 {
            self.swap(first, first + i);
            self.sift_down(0, i, first);
            i -= 1;
        }
    }

    fn pdqsort(&mut self, mut a: isize, mut b: isize, mut limit: isize) {
        const MAX_INSERTION: isize = 12;
        let (mut was_balanced, mut was_partitioned) = (true, true);
        loop {
            let length = b - a;
            if length <= MAX_INSERTION {
                self.insertion_sort(a, b);
                return;
            }
            if limit == 0 {
                self.heap_sort(a, b);
                return;
            }
            if !was_balanced {
                self.break_patterns(a, b);
                limit -= 1;
            }
            let (mut pivot, mut hint) = self.choose_pivot(a, b);
            if hint == Hint::Decreasing {
                self.reverse_range(a, b);
                pivot = (b - 1) - (pivot - a);
                hint = Hint::Increasing;
            }
            if was_balanced
                && was_partitioned
                && hint == Hint::Increasing
                && self.partial_insertion_sort(a, b)
            {
                return;
            }
            if a > 0 && !self.less(a - 1, pivot) {
                a = self.partition_equal(a, b, pivot);
                continue;
            }
            let (mid, already) = self.partition(a, b, pivot);
            was_partitioned = already;
            let (left, right) = (mid - a, b - mid);
            let threshold = length / 8;
            if left < right {
                was_balanced = left >= threshold;
                self.pdqsort(a, mid, limit);
                a = mid + 1;
            } else {
                was_balanced = right >= threshold;
                self.pdqsort(mid + 1, b, limit);
                b = mid;
            }
        }
    }

    fn partition(&mut self, a: isize, b: isize, pivot: isize) -> (isize, bool) {
        self.swap(a, pivot);
        let (mut i, mut j) = (a + 1, b - 1);
        while i <= j && self.less(i, a) {
            i += 1;
        }
        while i <= j && !self.less(j, a) {
            j -= 1;
        }
        if i > j {
            self.swap(j, a);
            return (j, true);
        }
        self.swap(i, j);
        i += 1;
        j -= 1;
        loop {
            while i <= j && self.less(i, a) {
                i += 1;
            }
            while i <= j && !self.less(j, a) {
                j -= 1;
            }
            if i > j {
                break;
            }
            self.swap(i, j);
            i += 1;
            j -= 1;
        }
        self.swap(j, a);
        (j, false)
    }

    fn partition_equal(&mut self, a: isize, b: isize, pivot: isize) -> isize {
        self.swap(a, pivot);
        let (mut i, mut j) = (a + 1, b - 1);
        loop {
            while i <= j && !self.less(a, i) {
                i += 1;
            }
            while i <= j && self.less(a, j) {
                j -= 1;
            }
            if i > j {
                return i;
            }
            self.swap(i, j);
            i += 1;
            j -= 1;
        }
    }

    fn partial_insertion_sort(&mut self, a: isize, b: isize) -> bool {
        const MAX_STEPS: usize = 5;
        const SHORTEST_SHIFTING: isize = 50;
        let mut i = a + 1;
        for _ in 0..MAX_STEPS {
            while i < b && !self.less(i, i - 1) {
                i += 1;
            }
            if i == b {
                return true;
            }
            if b - a < SHORTEST_SHIFTING {
                return false;
            }
            self.swap(i, i - 1);
            if i - a >= 2 {
                let mut j = i - 1;
                while j >= 1 {
                    if !self.less(j, j - 1) {
                        break;
                    }
                    self.swap(j, j - 1);
                    j -= 1;
                }
            }
            if b - i >= 2 {
                let mut j = i + 1;
                while j < b {
                    if !self.less(j, j - 1) {
                        break;
                    }
                    self.swap(j, j - 1);
                    j += 1;
                }
            }
        }
        false
    }

    fn break_patterns(&mut self, a: isize, b: isize) {
        let length = b - a;
        if length < 8 {
            return;
        }
        let mut random = length as u64;
        let modulus = 1u64 << bit_len(length as u64);
        let mut idx = a + (length / 4) * 2 - 1;
        while idx <= a + (length / 4) * 2 + 1 {
            random ^= random << 13;
            random ^= random >> 7;
            random ^= random << 17;
            let mut other = (random & (modulus - 1)) as isize;
            if other >= length {
                other -= length;
            }
            self.swap(idx, a + other);
            idx += 1;
        }
    }

    fn choose_pivot(&mut self, a: isize, b: isize) -> (isize, Hint) {
        const SHORTEST_NINTHER: isize = 50;
        const MAX_SWAPS: usize = 4 * 3;
        let l = b - a;
        let mut swaps = 0;
        let mut i = a + l / 4;
        let mut j = a + l / 4 * 2;
        let mut k = a + l / 4 * 3;
        if l >= 8 {
            if l >= SHORTEST_NINTHER {
                i = self.median(i - 1, i, i + 1, &mut swaps);
                j = self.median(j - 1, j, j + 1, &mut swaps);
                k = self.median(k - 1, k, k + 1, &mut swaps);
            }
            j = self.median(i, j, k, &mut swaps);
        }
        match swaps {
            0 => (j, Hint::Increasing),
            MAX_SWAPS => (j, Hint::Decreasing),
            _ => (j, Hint::Unknown),
        }
    }

    fn order2(&mut self, a: isize, b: isize, swaps: &mut usize) -> (isize, isize) {
        if self.less(b, a) {
            *swaps += 1;
            (b, a)
        } else {
            (a, b)
        }
    }

    fn median(&mut self, a: isize, b: isize, c: isize, swaps: &mut usize) -> isize {
        let (a, b) = self.order2(a, b, swaps);
        let (b, _) = self.order2(b, c, swaps);
        let (_, b) = self.order2(a, b, swaps);
        b
    }

    fn reverse_range(&mut self, a: isize, b: isize) {
        let (mut i, mut j) = (a, b - 1);
        while i < j {
            self.swap(i, j);
            i += 1;
            j -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::sort_slice;

    #[test]
    fn sorts_like_a_sort() {
        for n in [0usize, 1, 5, 12, 13, 49, 50, 51, 200, 1000] {
            let mut v: Vec<u64> = (0..n as u64).map(|i| (i * 7919) % 1009).collect();
            let mut want = v.clone();
            want.sort_unstable();
            sort_slice(&mut v, |a, b| a < b);
            assert_eq!(v, want, "{n}");
        }
    }

    #[test]
    fn inconsistent_orders_terminate() {
        let mut v: Vec<f64> = (0..500)
            .map(|i| {
                if i % 3 == 0 {
                    f64::NAN
                } else {
                    f64::from(i % 17)
                }
            })
            .collect();
        sort_slice(&mut v, |a, b| a < b);
        assert_eq!(v.len(), 500);
        // Small lists use insertion sort: a NaN is never less, nor greater, than anything.
        let mut small = vec![f64::NAN, 1.0];
        sort_slice(&mut small, |a, b| a < b);
        assert!(small[0].is_nan() && small[1] == 1.0);
    }
}
