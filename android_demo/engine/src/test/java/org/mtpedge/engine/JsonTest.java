package org.mtpedge.engine;

import java.util.List;
import java.util.Map;

import org.mtpedge.engine.json.Json;
import org.mtpedge.engine.json.JsonException;

/** The small JSON reader: values, escapes, numbers, and clear errors. */
public class JsonTest {
    public void testParsesNestedValues() {
        Object value = Json.parse(" {\"a\": [1, -2.5, 1e-9, true, false, null], \"b\": {\"c\": \"x\\u00e9\\n\\\"\"}} ");
        Map<?, ?> map = (Map<?, ?>) value;
        List<?> a = (List<?>) map.get("a");
        Check.equal(1L, a.get(0), "integer");
        Check.equal(-2.5, a.get(1), "fraction");
        Check.equal(1e-9, a.get(2), "exponent");
        Check.equal(Boolean.TRUE, a.get(3), "true");
        Check.equal(null, a.get(5), "null");
        Check.equal("xé\n\"", ((Map<?, ?>) map.get("b")).get("c"), "escapes");
        Check.equal("🙂", Json.parse("\"\\ud83d\\ude42\""), "surrogate pair");
    }

    public void testMalformedJsonNamesTheOffset() {
        JsonException err = Check.throwsError(JsonException.class, () -> Json.parse("{\"a\": [1, 2}"), "bad array");
        Check.isTrue(err.getMessage().contains("offset 11"), err.getMessage());
        Check.throwsError(JsonException.class, () -> Json.parse("[1] 2"), "trailing value");
        Check.throwsError(JsonException.class, () -> Json.parse("\"open"), "open string");
    }
}
