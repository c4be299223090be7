// Tests of the failover order: the home stays first, the others are each
// drawn second by some agents.

package agent

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestTheHomeStaysFirstAndTheOthersAreSpread(t *testing.T) {
	urls := []string{"https://home", "https://a", "https://b", "https://c"}
	rng := rand.New(rand.NewPCG(1, 2))
	second := map[string]int{}
	for range 300 {
		got := failoverOrder(urls, rng.Shuffle)
		if got[0] != urls[0] {
			t.Fatalf("the home moved: %v", got)
		}
		rest := slices.Clone(got[1:])
		slices.Sort(rest)
		if !slices.Equal(rest, urls[1:]) {
			t.Fatalf("not the other gateways, each once: %v", got)
		}
		second[got[1]]++
	}
	for _, u := range urls[1:] {
		if second[u] < 50 {
			t.Errorf("%s was second for %d of 300 agents: %v", u, second[u], second)
		}
	}
	if !slices.Equal(urls, []string{"https://home", "https://a", "https://b", "https://c"}) {
		t.Errorf("the configured list was changed: %v", urls)
	}
}

func TestTwoGatewaysOrOneKeepTheirOrder(t *testing.T) {
	never := func(int, func(i, j int)) { t.Fatal("nothing to draw") }
	for _, urls := range [][]string{{"https://home"}, {"https://home", "https://other"}} {
		if got := failoverOrder(urls, never); !slices.Equal(got, urls) {
			t.Errorf("%v became %v", urls, got)
		}
	}
}
