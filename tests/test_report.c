/* The HTML conformance report (lacs/report.h, checker/report_html.c) on
 * hand-written reports: what a plugin or a file name says cannot become
 * markup, the verdicts and failures are the report's, a non-finite ratio
 * over time is drawn, and anything but a lacs check report is refused.
 * tests/python/test_report.py renders real reports in Chromium. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "lacs/report.h"
#include "lacs/types.h"

static const char report[] =
    "{\"lacs_version\":\"1.4\",\"impl\":\"<script>alert(1)</script>.so\",\"vectors\":\"v&\\\"x\",\"manifest\":null,"
    "\"summary\":{\"passed\":1,\"failed\":1,\"skipped\":0},"
    "\"verdict\":{\"level\":\"required\",\"citation\":\"does not conform <b>\",\"exit_status\":1,\"declared\":null,"
    "\"strict_failed\":[],\"groups\":[{\"op\":\"delta_rule\",\"tier\":\"fp32\",\"verdict\":\"fails\",\"declared\":false,"
    "\"passed\":1,\"failed\":1,\"skipped\":0,\"excluded\":0,\"invalid\":0,\"strict_failed\":[]}]},"
    "\"cases\":[{\"id\":\"delta_rule-fp32-ok\",\"op\":\"delta_rule\",\"tier\":\"fp32\",\"status\":\"PASS\",\"ratio\":0.01,"
    "\"ratio_text\":\"0.01\",\"outputs\":[{\"name\":\"o\",\"ratio\":0.01,\"ratio_text\":\"0.01\"}],\"seconds\":0.1},"
    "{\"id\":\"delta_rule-fp32-<img>\",\"op\":\"delta_rule\",\"tier\":\"fp32\",\"status\":\"FAIL\",\"outcome\":\"failed\","
    "\"ratio\":null,\"ratio_text\":\"inf\",\"message\":null,\"seconds\":0.2,\"outputs\":[{\"name\":\"o\",\"ratio\":null,"
    "\"ratio_text\":\"inf\",\"normwise_ratio\":null,\"elementwise_ratio\":null,\"where\":\"o[b=0, t=1, head=0, v=0]\","
    "\"expected\":0.5,\"actual\":null,\"allowed\":0.001,\"nonfinite_mismatches\":1}],"
    "\"error_over_time\":[{\"output\":\"o\",\"ratios\":[0.5,null,3]}]}]}";

Test(report, escapes_what_it_quotes_and_shows_the_reports_verdicts)
{
    char *html = lacs_report_html(report);
    cr_assert_not_null(html, "%s", lacs_last_error());
    cr_assert_null(strstr(html, "<script"), "a name became markup");
    cr_assert_null(strstr(html, "<img"));
    cr_assert_not_null(strstr(html, "id=\"citation\">does not conform &lt;b&gt;</p>"));
    cr_assert_not_null(strstr(html, "&lt;script&gt;alert(1)&lt;/script&gt;.so"));
    cr_assert_not_null(strstr(html, "v&amp;&quot;x (not verified"));
    cr_assert_not_null(strstr(html, "data-op=\"delta_rule\" data-tier=\"fp32\" data-verdict=\"fails\""));
    cr_assert_not_null(strstr(html, "data-case=\"delta_rule-fp32-&lt;img&gt;\""));
    cr_assert_not_null(strstr(html, "o[b=0, t=1, head=0, v=0]: expected 0.5, got non-finite, allowed error 0.001"));
    cr_assert_not_null(strstr(html, "1 element(s) non-finite where the golden is not"));
    cr_assert_not_null(strstr(html, "<svg class=\"over-time\" data-output=\"o\""));
    cr_assert_null(strstr(html, "http"), "the page refers to something outside itself");
    lacs_report_free(html);
}

Test(report, refuses_what_is_not_a_report)
{
    const char *bad[] = {"", "[]", "{\"cases\":[]}", "{\"verdict\":{},\"cases\":{}}", "{not json"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_null(lacs_report_html(bad[i]), "accepted %s", bad[i]);
        cr_assert_not_null(strstr(lacs_last_error(), "lacs check report"), "%s", lacs_last_error());
    }
    cr_assert_null(lacs_report_html(NULL));
}
