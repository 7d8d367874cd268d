package org.mtpedge.engine;

import java.util.Map;

/** The sampling distribution (temperature, top-k, top-p) against the Python runtime's probabilities(). */
public class SamplingGoldenTest {
    public void testProbabilitiesMatchPython() {
        for (Map<String, Object> c : Golden.cases(Golden.load("sampling.json"), "cases")) {
            SamplingConfig config = new SamplingConfig(Golden.number(c, "temperature"), Golden.integer(c, "top_k"),
                    Golden.number(c, "top_p"), 1L);
            String what = "T=" + config.temperature + " k=" + config.topK + " p=" + config.topP;
            Check.close(Golden.doubles(c, "probs"), Sampler.probabilities(Golden.floats(c, "logits"), config), 1e-12,
                    what);
        }
    }

    public void testSeededSamplingDrawsOnlyKeptTokensAndIsReproducible() {
        Map<String, Object> c = Golden.cases(Golden.load("sampling.json"), "cases").get(4);
        SamplingConfig config = new SamplingConfig(Golden.number(c, "temperature"), Golden.integer(c, "top_k"),
                Golden.number(c, "top_p"), 7L);
        double[] probs = Golden.doubles(c, "probs");
        Sampler a = new Sampler(config);
        Sampler b = new Sampler(config);
        for (int i = 0; i < 200; i++) {
            int token = a.choose(Golden.floats(c, "logits"));
            Check.isTrue(probs[token] > 0, "drew token " + token + " whose probability is 0");
            Check.equal(token, b.choose(Golden.floats(c, "logits")), "same seed, draw " + i);
        }
    }
}
